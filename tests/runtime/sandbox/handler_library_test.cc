#include "shoal/runtime/sandbox/handler_library.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/sandbox_test_util.h"

namespace shoal {
namespace {

using testing::TempDir;
using testing::WriteFile;

class HandlerLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/handlers";
    mkdir(dir_.c_str(), 0755);
    mkdir((dir_ + "/team").c_str(), 0755);
    WriteFile(dir_ + "/team/lib.so", "ELF", 0644);
    dirs_ = {dir_};
  }
  std::string Error(const std::string& path) {
    auto r = OpenHandlerLibrary(path, dirs_);
    return r.ok() ? "ok" : r.status().message();
  }
  TempDir tmp_{"shoal-sandbox-test", 0755};  // 0755: other uids look in
  std::string dir_;
  std::vector<std::string> dirs_;
};

TEST_F(HandlerLibraryTest, OpensTheFileItself) {
  auto fd = OpenHandlerLibrary(dir_ + "/team/lib.so", dirs_);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  char buf[8] = {};
  EXPECT_EQ(pread(fd->get(), buf, sizeof buf, 0), 3);
  EXPECT_STREQ(buf, "ELF");
  EXPECT_TRUE(fcntl(fd->get(), F_GETFD) & FD_CLOEXEC);
}

TEST_F(HandlerLibraryTest, RefusesPathsOutsideTheDirectories) {
  EXPECT_EQ(Error("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            "/usr/lib/x86_64-linux-gnu/libc.so.6 is outside the handler directories (allowed: " +
                dir_ + ")");
  // `..` is resolved before the check: no climbing out of a handler directory.
  EXPECT_EQ(Error(dir_ + "/../escape.so"),
            dir_ + "/../escape.so is outside the handler directories (allowed: " + dir_ + ")");
  EXPECT_EQ(Error(dir_), dir_ + " is outside the handler directories (allowed: " + dir_ + ")");
  EXPECT_EQ(Error("lib.so"), "must be an absolute path");
  EXPECT_EQ(Error(dir_ + "/team/none.so"), "no such file on this node: " + dir_ + "/team/none.so");
}

TEST_F(HandlerLibraryTest, RefusesWritableFilesAndDirectories) {
  WriteFile(dir_ + "/team/ww.so", "ELF", 0666);
  chmod((dir_ + "/team/ww.so").c_str(), 0666);
  EXPECT_EQ(Error(dir_ + "/team/ww.so"),
            dir_ + "/team/ww.so is writable by group or others (mode 0666)");
  chmod((dir_ + "/team").c_str(), 0775);
  EXPECT_EQ(Error(dir_ + "/team/lib.so"),
            dir_ + "/team is writable by group or others (mode 0775)");
  chmod((dir_ + "/team").c_str(), 0755);
  chmod(dir_.c_str(), 0777);
  EXPECT_EQ(Error(dir_ + "/team/lib.so"),
            "handler directory " + dir_ + " is writable by group or others (mode 0777)");
}

TEST_F(HandlerLibraryTest, RefusesFilesOfOtherUsers) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  ASSERT_EQ(chown((dir_ + "/team/lib.so").c_str(), 4321, 4321), 0);
  EXPECT_EQ(Error(dir_ + "/team/lib.so"), dir_ + "/team/lib.so is owned by uid 4321, not root");
}

TEST_F(HandlerLibraryTest, NeverFollowsSymlinks) {
  const std::string evil = tmp_.path() + "/evil.so";
  WriteFile(evil, "EVIL", 0644);
  ASSERT_EQ(symlink(evil.c_str(), (dir_ + "/team/link.so").c_str()), 0);
  EXPECT_EQ(Error(dir_ + "/team/link.so"),
            dir_ + "/team/link.so is a symbolic link (not followed below a handler directory)");
  // A directory on the way swapped for a symlink (after a deploy checked it).
  ASSERT_EQ(rename((dir_ + "/team").c_str(), (tmp_.path() + "/team").c_str()), 0);
  ASSERT_EQ(symlink((tmp_.path() + "/team").c_str(), (dir_ + "/team").c_str()), 0);
  EXPECT_EQ(Error(dir_ + "/team/lib.so"),
            dir_ + "/team is a symbolic link (not followed below a handler directory)");
}

TEST_F(HandlerLibraryTest, RefusesSpecialFiles) {
  ASSERT_EQ(mkfifo((dir_ + "/team/fifo.so").c_str(), 0644), 0);
  EXPECT_EQ(Error(dir_ + "/team/fifo.so"), dir_ + "/team/fifo.so is not a regular file");
}

TEST(HandlerDirsTest, OriginIsTheExecutablesDirectory) {
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  std::string dir(self);
  dir = dir.substr(0, dir.rfind('/'));
  const std::string parent = dir.substr(0, dir.rfind('/'));
  EXPECT_EQ(ResolveHandlerDirs(
                {"$ORIGIN/../lib/shoal/handlers/", "/usr/lib/shoal/handlers", "relative/dir"}),
            (std::vector<std::string>{parent + "/lib/shoal/handlers", "/usr/lib/shoal/handlers"}));
}

TEST(HandlerEnvTest, VariablesThatLoadCodeAreNamed) {
  EXPECT_NE(CodeLoadingEnvReason("LD_PRELOAD"), "");
  EXPECT_NE(CodeLoadingEnvReason("LD_LIBRARY_PATH"), "");
  EXPECT_NE(CodeLoadingEnvReason("LD_AUDIT"), "");
  EXPECT_NE(CodeLoadingEnvReason("GCONV_PATH"), "");
  EXPECT_NE(CodeLoadingEnvReason("GLIBC_TUNABLES"), "");
  EXPECT_NE(CodeLoadingEnvReason("LOCPATH"), "");
  EXPECT_NE(CodeLoadingEnvReason("PYTHONPATH"), "");
  EXPECT_EQ(CodeLoadingEnvReason("MODEL_PATH"), "");
  EXPECT_EQ(CodeLoadingEnvReason("OLD_PRELOAD"), "");
}

}  // namespace
}  // namespace shoal
