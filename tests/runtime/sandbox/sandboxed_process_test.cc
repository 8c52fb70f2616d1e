#include "shoal/runtime/sandbox/sandboxed_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "tests/support/sandbox_test_util.h"

namespace shoal {
namespace {

using testing::StatusField;

struct Ran {
  std::string out;
  int status = 0;
};

// Spawns `argv` with its stdout on a pipe and waits for it.
Ran SpawnAndWait(std::vector<std::string> argv, const SandboxOptions& sb,
                 std::vector<std::pair<int, int>> extra = {}) {
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
  SpawnOptions o;
  o.file = argv[0];
  o.argv = std::move(argv);
  o.env = {"PATH=/usr/bin:/bin"};
  o.fds = {{1, p[1]}};
  o.fds.insert(o.fds.end(), extra.begin(), extra.end());
  auto child = SpawnSandboxed(o, sb);
  close(p[1]);
  Ran r;
  if (!child.ok()) {
    close(p[0]);
    r.out = "spawn failed: " + child.status().message();
    return r;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  pollfd pf{child->pidfd(), POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 10000), 1);  // the pidfd turns readable at exit
  EXPECT_TRUE(child->TryReap(&r.status));
  return r;
}

TEST(SandboxedProcessTest, ChildRunsAsTheTenantWithNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: a child cannot take another uid";
  auto prog = SeccompProgram::Compile({});
  ASSERT_TRUE(prog.ok());
  SandboxOptions sb;
  sb.switch_ids = true;
  sb.ids = TenantId{54321, 54322};
  sb.seccomp = &*prog;
  Ran r = SpawnAndWait({"/bin/cat", "/proc/self/status"}, sb);
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
  EXPECT_EQ(StatusField(r.out, "Uid"), "54321 54321 54321 54321");
  EXPECT_EQ(StatusField(r.out, "Gid"), "54322 54322 54322 54322");
  EXPECT_EQ(StatusField(r.out, "Groups"), "");
  for (const char* k : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(StatusField(r.out, k), "0000000000000000") << k;
  }
  EXPECT_EQ(StatusField(r.out, "NoNewPrivs"), "1");
  EXPECT_EQ(StatusField(r.out, "Seccomp"), "2");
}

TEST(SandboxedProcessTest, OnlyTheGivenDescriptorsReachTheChild) {
  // A descriptor shoald holds without O_CLOEXEC (as Boost's shm_open does) must not leak.
  const int leaky = open("/dev/null", O_RDONLY);
  const int passed = open("/dev/zero", O_RDONLY | O_CLOEXEC);
  SandboxOptions sb;
  // `ls -l` of the child's own descriptors (ls itself is the child: no shell, no pipeline
  // whose descriptors could be caught half-closed); the directory ls reads is /proc/...
  Ran r = SpawnAndWait({"/bin/ls", "-l", "/proc/self/fd"}, sb, {{4, passed}});
  close(leaky);
  close(passed);
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
  std::string fds;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    const std::string target = line.substr(arrow + 4);
    if (target.rfind("/proc/", 0) == 0) continue;  // ls's own opendir
    const auto space = line.rfind(' ', arrow - 1);
    const std::string fd = line.substr(space + 1, arrow - space - 1);
    fds += fd + (fd == "4" ? "=" + target : "") + " ";
  }
  // 0 and 2 (/dev/null), 1 (the pipe), 4 (/dev/zero): not `leaky`, nor the error pipe, nor
  // the test's own stderr.
  EXPECT_EQ(fds, "0 1 2 4=/dev/zero ") << r.out;
}

TEST(SandboxedProcessTest, FailuresBeforeExecAreReported) {
  SandboxOptions sb;
  SpawnOptions o;
  o.file = "/nonexistent/shoal-fn";
  auto child = SpawnSandboxed(o, sb);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().message(),
            "sandbox: execve /nonexistent/shoal-fn: No such file or directory");
}

TEST(SandboxedProcessTest, SignalsGoThroughThePidfd) {
  SandboxOptions sb;
  SpawnOptions o;
  o.file = "/bin/sleep";
  o.argv = {"/bin/sleep", "30"};
  auto child = SpawnSandboxed(o, sb);
  ASSERT_TRUE(child.ok()) << child.status().message();
  int status = 0;
  EXPECT_FALSE(child->TryReap(&status));
  EXPECT_EQ(child->Signal(SIGTERM), 0);
  pollfd pf{child->pidfd(), POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 10000), 1);
  ASSERT_TRUE(child->TryReap(&status));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(child->Signal(SIGTERM), -ESRCH);  // reaped: never a recycled pid
}

}  // namespace
}  // namespace shoal
