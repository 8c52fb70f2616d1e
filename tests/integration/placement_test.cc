// shoald places every instance start over a model of its own node: a function whose resources
// the node cannot give is refused with 503 naming the resource, and `shoal describe` and
// GET /v1/functions/{name} say why; the others run as before.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "tests/support/shoald_fixture.h"

namespace shoal::testing {
namespace {

std::string Manifest(const std::string& name, const std::string& resources) {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
         "\nspec:\n  handler:\n    builtin: echo\n  resources: " + resources + "\n";
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(shoald_.Start()) << shoald_.Log(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  // Invokes a function the node cannot place: 503 at once (not a hang), the body names
  // `resource`, and the function's status and `shoal describe` give the same reason.
  void ExpectUnschedulable(const std::string& name, const std::string& resource) {
    auto r = Http(shoald_.port(), "POST", "/fn/" + name, "hi", {}, 0, 20000);
    EXPECT_EQ(r.status, 503) << r.error << " " << r.body;
    EXPECT_NE(r.body.find("unschedulable"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find(resource), std::string::npos) << r.body;
    auto st = shoald_.Api("GET", "/v1/functions/" + name);
    ASSERT_EQ(st.status, 200) << st.body;
    const auto j = nlohmann::json::parse(st.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << st.body;
    const std::string dump = j.dump();
    EXPECT_NE(dump.find("\"unschedulable\":\""), std::string::npos) << dump;
    EXPECT_NE(dump.find(resource), std::string::npos) << dump;
    auto d = shoald_.Cli({"describe", name});
    EXPECT_EQ(d.exit_code, 0) << d.err;
    EXPECT_NE(d.out.find("unschedulable: "), std::string::npos) << d.out;
    EXPECT_NE(d.out.find(resource), std::string::npos) << d.out;
    EXPECT_EQ(shoald_.InstancePids(name).size(), 0u);
  }
  Shoald shoald_;
};

TEST_F(PlacementTest, GpuRequestOnAGpuLessNodeIsRefusedWith503NamingTheGpu) {
  struct stat sb;
  if (stat("/dev/nvidia0", &sb) == 0) {
    GTEST_SKIP() << "this machine has /dev/nvidia0: a gpu: 1 function would schedule here";
  }
  ASSERT_EQ(shoald_.Deploy(Manifest("wants-gpu", "{gpu: 1}")).exit_code, 0);
  ExpectUnschedulable("wants-gpu", "GPU");
  EXPECT_GE(shoald_.Metric("shoal_placement_decisions_total", "kind=\"unschedulable\""), 1.0);
  // A second request is refused the same way (the reason is kept, not a one-off).
  auto again = Http(shoald_.port(), "POST", "/fn/wants-gpu", "x", {}, 0, 20000);
  EXPECT_EQ(again.status, 503);
  EXPECT_NE(again.body.find("GPU"), std::string::npos) << again.body;
}

TEST_F(PlacementTest, MemoryBeyondTheNodeIsRefusedAndNormalFunctionsStillRun) {
  ASSERT_EQ(shoald_.Deploy(Manifest("huge", "{memory: 64Ti}")).exit_code, 0);
  ExpectUnschedulable("huge", "memory");

  ASSERT_EQ(shoald_.Deploy(Manifest("normal", "{cpu: 100m, memory: 64Mi}")).exit_code, 0);
  auto r = Http(shoald_.port(), "POST", "/fn/normal", "hello");
  EXPECT_EQ(r.status, 200) << r.error << " " << r.body;
  EXPECT_EQ(r.body, "hello");
  EXPECT_GE(shoald_.Metric("shoal_placement_decisions_total", "function=\"normal\""), 1.0);
  auto st = shoald_.Api("GET", "/v1/functions/normal");
  const auto j = nlohmann::json::parse(st.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << st.body;
  EXPECT_EQ(j.dump().find("\"unschedulable\":\"needs"), std::string::npos) << st.body;
}

}  // namespace
}  // namespace shoal::testing
