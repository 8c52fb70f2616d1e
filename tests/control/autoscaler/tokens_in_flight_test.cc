// metric tokensInFlight: a language model's tokens in flight drive the scale-up of kpa, shoal and
// learned (deterministic: the signals fed by hand, the decisions asserted), and a manifest's
// block that cannot use it is refused naming the field.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "signals_for_test.h"

namespace shoal {
namespace {

using testing::Interval;
using testing::Serve;

std::unique_ptr<FunctionAutoscaler> Make(const std::string& policy, const std::string& metric,
                                         double target) {
  AutoscalingConfig c;
  c.policy = policy;
  c.metric = metric;
  c.target = target;
  auto a = FunctionAutoscaler::Make(c);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : nullptr;
}

// One interval of an lm function (concurrency 8): 2 requests arrived and finished (1 s each),
// 4 in flight, 1400 tokens in flight (prompts + the tokens still to decode), `ready` instances.
FunctionSignals Busy(double now, uint32_t ready) {
  FunctionSignals s = Interval(now, 1, 8, 0);
  Serve(s, 2, 1.0);
  s.inflight = 4;
  s.tokens_in_flight = 1400;
  s.running_sequences = 4;
  s.ready = ready;
  s.busy = ready;
  return s;
}

TEST(TokensInFlight, KpaScalesOnTokensPerInstance) {
  auto tokens = Make("kpa", "tokensInFlight", 100);
  auto requests = Make("kpa", "concurrency", 0);
  ScalingDecision dt, dr;
  for (int t = 0; t <= 60; ++t) {
    dt = tokens->Observe(Busy(t, 20));
    dr = requests->Observe(Busy(t, 1));
  }
  // ceil(1400 / (100 x 0.7)) = 20; on requests: ceil(4 / (8 x 0.7)) = 1.
  EXPECT_EQ(dt.replicas, 20u);
  EXPECT_DOUBLE_EQ(dt.concurrency_target, 100.0);
  EXPECT_EQ(dr.replicas, 1u);
}

TEST(TokensInFlight, KpaScalesUpFromOneInstanceInPanic) {
  auto tokens = Make("kpa", "tokensInFlight", 100);
  // Ten quiet seconds on one instance (no tokens in flight), then a burst of 1400 tokens.
  FunctionSignals quiet = Interval(0, 1, 8, 0);
  quiet.ready = 1;
  for (int t = 0; t < 10; ++t) {
    quiet.now_s = t;
    tokens->Observe(quiet);
  }
  // The panic window's average (1400 over its 6 one-second buckets: 233.3) needs
  // ceil(233.3 / 70) = 4 >= 2 x 1 ready: panic, 4 instances at once.
  const ScalingDecision d = tokens->Observe(Busy(10, 1));
  EXPECT_TRUE(d.panic);
  EXPECT_EQ(d.replicas, 4u);
}

TEST(TokensInFlight, ShoalAndLearnedSizeForTheTokens) {
  for (const char* policy : {"shoal", "learned"}) {
    auto tokens = Make(policy, "tokensInFlight", 100);
    auto requests = Make(policy, "concurrency", 0);
    ScalingDecision dt, dr;
    for (int t = 0; t <= 20; ++t) {
      dt = tokens->Observe(Busy(t, 15));
      dr = requests->Observe(Busy(t, 15));
    }
    // ceil(1400 / (100 x 0.95)) = 15; on requests 2 per second of 1 s over 8 slots: 1.
    EXPECT_EQ(dt.replicas, 15u) << policy;
    EXPECT_EQ(dr.replicas, 1u) << policy;
  }
}

TEST(TokensInFlight, RefusedWhereItCannotApply) {
  AutoscalingConfig c;
  c.policy = "kpa";
  c.metric = "tokensInFlight";
  EXPECT_EQ(FunctionAutoscaler::Make(c).status().message(),
            "target: metric tokensInFlight needs a target (tokens per instance)");
  c.policy = "rl-q";
  c.target = 100;
  EXPECT_EQ(FunctionAutoscaler::Make(c).status().message(),
            "metric: tokensInFlight needs policy kpa, shoal or learned (policy is rl-q)");
  c.policy = "kpa";
  c.metric = "rps";
  EXPECT_EQ(FunctionAutoscaler::Make(c).status().message(),
            "metric: must be concurrency or tokensInFlight, got \"rps\"");
}

}  // namespace
}  // namespace shoal
