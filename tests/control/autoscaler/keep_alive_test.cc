// Keep-alive: the fixed baseline and the idle-time histogram (Shahrad et al. 2020) on
// synthetic idle-time distributions.
#include "shoal/control/autoscaler/keep_alive.h"

#include <gtest/gtest.h>

namespace shoal {
namespace {

TEST(FixedKeepAlive, OneMinute) {
  auto p = MakeKeepAlivePolicy("fixed", KeepAliveParams{});
  ASSERT_TRUE(p.ok());
  (*p)->OnInvocation(0);
  (*p)->OnInvocation(600);
  const KeepAliveDecision d = (*p)->Decide();
  EXPECT_DOUBLE_EQ(d.prewarm_after_s, 0);
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 60);
}

TEST(HistogramKeepAlive, UniformFiveToSevenMinutes) {
  HistogramKeepAlive h{HistogramKeepAliveParams{}};
  double now = 0;
  h.OnInvocation(now);
  for (int i = 0; i < 100; ++i) {
    now += 300 + 120 * (i + 0.5) / 100;  // idle times spread over [5, 7) minutes
    h.OnInvocation(now);
  }
  EXPECT_EQ(h.samples(), 100u);
  EXPECT_EQ(h.bins()[5], 50u);
  EXPECT_EQ(h.bins()[6], 50u);
  EXPECT_EQ(h.mode(), HistogramKeepAlive::Mode::kHistogram);
  const KeepAliveDecision d = h.Decide();
  // Head (5th percentile) in the 5-minute bin: pre-warm at 300 s - 10% = 270 s.
  EXPECT_DOUBLE_EQ(d.prewarm_after_s, 270);
  // Tail (99th percentile) in the 6-minute bin, upper edge 420 s + 10% = 462 s after the
  // invocation, i.e. 192 s after the pre-warm.
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 192);
  EXPECT_DOUBLE_EQ(d.prewarm_after_s + d.keep_alive_s, 462);
}

TEST(HistogramKeepAlive, FallsBackWithTooFewSamples) {
  HistogramKeepAlive h{HistogramKeepAliveParams{}};
  for (int i = 0; i <= 9; ++i) h.OnInvocation(i * 360.0);  // 9 idle times
  EXPECT_EQ(h.mode(), HistogramKeepAlive::Mode::kFallback);
  KeepAliveDecision d = h.Decide();
  EXPECT_DOUBLE_EQ(d.prewarm_after_s, 0);
  // While learning, the window covers the longest idle time seen (360 s + 10%), not only the
  // fixed minute: a 6-minute timer stays warm instead of going cold on every call.
  EXPECT_NEAR(d.keep_alive_s, 396, 1e-9);
  HistogramKeepAliveParams fixed_only;
  fixed_only.cover_observed_idle = false;
  HistogramKeepAlive plain{fixed_only};
  for (int i = 0; i <= 9; ++i) plain.OnInvocation(i * 360.0);
  EXPECT_DOUBLE_EQ(plain.Decide().keep_alive_s, 60);
  HistogramKeepAlive fresh{HistogramKeepAliveParams{}};
  EXPECT_DOUBLE_EQ(fresh.Decide().keep_alive_s, 60);  // nothing seen: the fixed minute
  h.OnInvocation(10 * 360.0);                         // the 10th
  EXPECT_EQ(h.mode(), HistogramKeepAlive::Mode::kHistogram);
  d = h.Decide();
  EXPECT_DOUBLE_EQ(d.prewarm_after_s, 324);     // 360 * 0.9
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 462 - 324);  // 420 * 1.1 - 324
}

TEST(HistogramKeepAlive, FallsBackWhenTooSpreadOut) {
  HistogramKeepAlive h{HistogramKeepAliveParams{}};
  for (int i = 0; i < 2400; ++i) h.AddIdleTime((i % 240) * 60.0 + 30);  // flat over 4 hours
  EXPECT_LT(h.BinCountCv(), 0.01);
  EXPECT_EQ(h.mode(), HistogramKeepAlive::Mode::kFallback);
  EXPECT_DOUBLE_EQ(h.Decide().keep_alive_s, 60);
}

TEST(HistogramKeepAlive, FrequentInvocationsKeepAliveFromTheEnd) {
  HistogramKeepAlive h{HistogramKeepAliveParams{}};
  h.OnInvocations(0, 50);   // 49 idle times of 0
  h.OnInvocations(10, 50);  // one of 10 s, 49 of 0
  const KeepAliveDecision d = h.Decide();
  EXPECT_DOUBLE_EQ(d.prewarm_after_s, 0);  // head in bin 0: no unloading
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 66);    // bin 0's upper edge 60 s + 10%
}

TEST(HistogramKeepAlive, OutOfBoundsIdleTimesArePredicted) {
  HistogramKeepAlive h{HistogramKeepAliveParams{}};
  for (int i = 0; i < 12; ++i) h.AddIdleTime(5 * 3600.0);  // every 5 hours: beyond the range
  EXPECT_EQ(h.mode(), HistogramKeepAlive::Mode::kOutOfBounds);
  const KeepAliveDecision d = h.Decide();
  EXPECT_DOUBLE_EQ(d.prewarm_after_s, 18000 * 0.85);
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 18000 * 0.30);
}

TEST(HistogramKeepAlive, FactoryValidates) {
  KeepAliveParams p;
  p.histogram.bin_s = 0;
  auto bad = MakeKeepAlivePolicy("histogram", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("keep_alive.histogram.bin_s"), std::string::npos);
  EXPECT_FALSE(MakeKeepAlivePolicy("lru", KeepAliveParams{}).ok());
  auto ok = MakeKeepAlivePolicy("histogram", KeepAliveParams{});
  ASSERT_TRUE(ok.ok());
  EXPECT_STREQ((*ok)->name(), "histogram");
}

}  // namespace
}  // namespace shoal
