#include "shoal/runtime/sandbox/capabilities.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "tests/support/sandbox_test_util.h"

namespace shoal {
namespace {

TEST(CapabilitiesTest, KeepsOnlyTheNamedOnes) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: no capabilities to limit";
  // Irreversible: in a child.
  const pid_t pid = fork();
  if (pid == 0) {
    auto r = LimitCapabilities({"cap_kill", "cap_setuid"});
    if (!r.ok() || !r->root) _exit(10);
    if (r->kept != std::vector<std::string>{"cap_kill", "cap_setuid"}) _exit(11);
    const std::string st = testing::ReadAll("/proc/self/status");
    const uint64_t want = (1ull << 5) | (1ull << 7);  // CAP_KILL, CAP_SETUID
    for (const char* k : {"CapEff", "CapPrm", "CapBnd"}) {
      if (std::strtoull(testing::StatusField(st, k).c_str(), nullptr, 16) != want) _exit(12);
    }
    if (testing::StatusField(st, "CapInh") != "0000000000000000") _exit(13);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(CapabilityNames((1ull << 5) | (1ull << 7)),
            (std::vector<std::string>{"cap_kill", "cap_setuid"}));
}

}  // namespace
}  // namespace shoal
