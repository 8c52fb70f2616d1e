#include "shoal/runtime/sandbox/cgroup.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/sandbox_test_util.h"

namespace shoal {
namespace {

using testing::ReadAll;

TEST(CgroupTest, InstanceCgroupHasTheLimitsAndGoesAway) {
  const std::string node = "unit" + std::to_string(getpid());
  auto h = OpenCgroups(CgroupMode::kAuto, "shoal-test", node);
  if (!h.ok()) GTEST_SKIP() << "no writable cgroup hierarchy: " << h.status().message();
  CgroupLimits limits{0.25, 64ull << 20, 100};
  auto cg = (*h)->Create("fn-1", limits);
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  std::vector<std::string> dirs = (*cg)->dirs();
  ASSERT_FALSE(dirs.empty());
  // Whether the hierarchy has `file` (v1 and v2 name the limits differently); if so, it must
  // read `want`.
  auto has = [](const std::string& file, const std::string& want) {
    if (!std::filesystem::exists(file)) return false;
    EXPECT_EQ(ReadAll(file), want) << file;
    return true;
  };
  bool cpu = false, mem = false;
  for (const auto& d : dirs) {
    if (has(d + "/cpu.cfs_quota_us", "25000\n")) {
      EXPECT_EQ(ReadAll(d + "/cpu.cfs_period_us"), "100000\n");
      cpu = true;
    }
    cpu |= has(d + "/cpu.max", "25000 100000\n");
    mem |= has(d + "/memory.limit_in_bytes", "67108864\n");
    mem |= has(d + "/memory.max", "67108864\n");
    has(d + "/pids.max", "100\n");
  }
  EXPECT_TRUE(cpu);
  EXPECT_TRUE(mem);
  // A child joins it by writing "0" to the open cgroup.procs files.
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& fd : (*cg)->procs()) {
      if (write(fd.get(), "0", 1) != 1) _exit(1);
    }
    _exit(ReadAll("/proc/self/cgroup").find("/shoal-test/" + node + "/fn-1") != std::string::npos
              ? 0
              : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  cg->reset();
  for (const auto& d : dirs) EXPECT_FALSE(std::filesystem::exists(d)) << d;
  h->reset();
}

// Without resources.cpu a v1 instance gets no cpu group of its own (it would weigh as one task
// against all of shoald's threads); memory and pids still apply.
TEST(CgroupTest, NoCpuLimitNoV1CpuGroup) {
  const std::string node = "unitnocpu" + std::to_string(getpid());
  auto h = OpenCgroups(CgroupMode::kAuto, "shoal-test", node);
  if (!h.ok()) GTEST_SKIP() << "no writable cgroup hierarchy: " << h.status().message();
  if (std::string((*h)->version()) != "v1") GTEST_SKIP() << "v2: one group for all controllers";
  auto cg = (*h)->Create("fn-1", CgroupLimits{0, 64ull << 20, 100});
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  bool mem = false;
  for (const auto& d : (*cg)->dirs()) {
    EXPECT_FALSE(std::filesystem::exists(d + "/cpu.cfs_quota_us")) << d;
    if (std::filesystem::exists(d + "/memory.limit_in_bytes")) {
      EXPECT_EQ(ReadAll(d + "/memory.limit_in_bytes"), "67108864\n");
      mem = true;
    }
  }
  EXPECT_TRUE(mem);
  EXPECT_EQ((*cg)->procs().size(), (*cg)->dirs().size());
  cg->reset();
  h->reset();
}

TEST(CgroupTest, OffMeansNone) {
  auto h = OpenCgroups(CgroupMode::kOff, "shoal-test", "x");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "cgroups are off (config cgroups: off)");
}

}  // namespace
}  // namespace shoal
