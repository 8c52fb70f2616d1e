// SockmapProgram against the real kernel: load, attach, pin, count, unpin. Skips (with the
// reason) only where the capability is absent (not root, no BTF, no bpffs: bpf_capability.h);
// with it present, a program that fails to load or verify fails every test.
#include "shoal/dataplane/bpf/sockmap_program.h"

#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/support/bpf_capability.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

class SockmapProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string absent = bpf_test::BpfCapabilityAbsent(); !absent.empty()) {
      GTEST_SKIP() << "BPF is not available here: " << absent;
    }
    static int counter = 0;
    root_ = "/sys/fs/bpf/shoal-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    pin_dir_ = root_ + "/node";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // Loads the program; the capability is present (SetUp checked), so a failure is the test's.
  std::unique_ptr<SockmapProgram> Load() {
    auto p = SockmapProgram::Load(pin_dir_);
    if (!p.ok()) {
      ADD_FAILURE() << "the sk_msg program failed to load with root, BTF and bpffs present: "
                    << p.status().ToString();
      return nullptr;
    }
    return std::move(p).value();
  }

  std::string root_;
  std::string pin_dir_;
};

TEST_F(SockmapProgramTest, PinsWhileLoadedAndRemovesThemOnDestruction) {
  auto p = Load();
  ASSERT_TRUE(p);
  for (const char* name :
       {SockmapProgram::kSockHashPin, SockmapProgram::kCountersPin, SockmapProgram::kProgramPin}) {
    EXPECT_TRUE(fs::exists(fs::path(pin_dir_) / name)) << name;
  }
  // The pinned map is the live one: an fd opened from the pin sees the same object.
  int pinned = bpf_obj_get((pin_dir_ + "/" + SockmapProgram::kSockHashPin).c_str());
  ASSERT_GE(pinned, 0);
  bpf_map_info a{}, b{};
  uint32_t la = sizeof(a), lb = sizeof(b);
  ASSERT_EQ(bpf_obj_get_info_by_fd(pinned, &a, &la), 0);
  ASSERT_EQ(bpf_obj_get_info_by_fd(p->sock_hash_fd(), &b, &lb), 0);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.type, static_cast<uint32_t>(BPF_MAP_TYPE_SOCKHASH));
  EXPECT_EQ(a.max_entries, 65536u);
  close(pinned);

  p.reset();
  EXPECT_FALSE(fs::exists(pin_dir_));
}

TEST_F(SockmapProgramTest, RemovesStalePinsOfACrashedRun) {
  // A previous run that died left a pin with the name we use: pinning over it would fail.
  fs::create_directories(pin_dir_);
  int stale = bpf_map_create(BPF_MAP_TYPE_ARRAY, "stale", 4, 4, 1, nullptr);
  ASSERT_GE(stale, 0) << "cannot create a BPF map with the capability present: " << strerror(errno);
  ASSERT_EQ(bpf_obj_pin(stale, (pin_dir_ + "/" + SockmapProgram::kSockHashPin).c_str()), 0);
  close(stale);

  auto p = Load();
  ASSERT_TRUE(p);
  int pinned = bpf_obj_get((pin_dir_ + "/" + SockmapProgram::kSockHashPin).c_str());
  ASSERT_GE(pinned, 0);
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(pinned, &info, &len), 0);
  EXPECT_EQ(info.type, static_cast<uint32_t>(BPF_MAP_TYPE_SOCKHASH));
  close(pinned);
}

TEST_F(SockmapProgramTest, CountersStartAtZeroAndRejectOutOfRangeIds) {
  auto p = Load();
  ASSERT_TRUE(p);
  auto c = p->ReadCounters(17);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->events, 0u);
  EXPECT_EQ(c->drops, 0u);
  auto bad = p->ReadCounters(SockmapProgram::kCounterSlots);
  EXPECT_FALSE(bad.ok());
}

TEST_F(SockmapProgramTest, ProgramIsAttachedToTheSockHash) {
  auto p = Load();
  ASSERT_TRUE(p);
  uint32_t ids[4] = {};
  uint32_t count = 4;
  uint32_t attach_flags = 0;
  ASSERT_EQ(bpf_prog_query(p->sock_hash_fd(), BPF_SK_MSG_VERDICT, 0, &attach_flags, ids, &count), 0)
      << strerror(errno);
  ASSERT_EQ(count, 1u);
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(p->prog_fd(), &info, &len), 0);
  EXPECT_EQ(ids[0], info.id);
}

}  // namespace
}  // namespace shoal
