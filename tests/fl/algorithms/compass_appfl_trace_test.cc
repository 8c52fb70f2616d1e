// Shoal's FedCompassScheduler against the authors' own implementation: traces recorded from
// APPFL 1.12's CompassScheduler (bench/fl_appfl_replay.py, APPFL's defaults Q_min 20, Q_max 100,
// λ 1.5, m 0.9) replayed through Shoal's scheduler at the same arrival and timer times. Every
// event's answer must be APPFL's: who is applied alone, who waits in which group, who is late
// (general buffer), which updates each group aggregation combines, and every client's next
// local steps and group, in order.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/compass_trace.h"

namespace shoal::testing {
namespace {

CompassTrace Load(const std::string& name) {
  const std::string path = std::string(SHOAL_COMPASS_TRACE_DIR) + "/" + name + ".trace";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string error;
  CompassTrace tr = ParseCompassTrace(ss.str(), &error);
  EXPECT_EQ(error, "") << path;
  return tr;
}

size_t CountWith(const CompassTrace& tr, const std::string& part) {
  size_t n = 0;
  for (const auto& e : tr.events) n += e.line.find(part) != std::string::npos ? 1 : 0;
  return n;
}

class FedCompassAppflTrace : public ::testing::TestWithParam<const char*> {};

TEST_P(FedCompassAppflTrace, EveryAnswerIsAppfls) {
  const CompassTrace tr = Load(GetParam());
  ASSERT_EQ(tr.events.size(), 200u);
  EXPECT_EQ(tr.params.q_min, 20u);
  EXPECT_EQ(tr.params.q_max, 100u);
  EXPECT_DOUBLE_EQ(tr.params.latest_time_factor, 1.5);
  EXPECT_DOUBLE_EQ(tr.params.speed_momentum, 0.9);
  // Each trace covers late arrivals and timer-fired aggregations, not only full groups.
  EXPECT_GE(CountWith(tr, " general -> "), 5u);
  EXPECT_GE(CountWith(tr, " aggregate "), 25u);
  size_t timer_aggregations = 0;
  for (const auto& e : tr.events) {
    timer_aggregations += e.timer && e.line.find(" aggregate ") != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(timer_aggregations, 4u);

  const std::vector<std::string> shoal = ReplayCompassTrace(tr);
  ASSERT_EQ(shoal.size(), tr.events.size());
  for (size_t i = 0; i < shoal.size(); ++i) {
    ASSERT_EQ(shoal[i], tr.events[i].line) << "event " << i << " of " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, FedCompassAppflTrace,
                         ::testing::Values("uniform5", "lognormal16", "stragglers8"));

}  // namespace
}  // namespace shoal::testing
