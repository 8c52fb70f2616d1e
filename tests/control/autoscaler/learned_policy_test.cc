// Learned policy: the exact counterfactual costs of its idle actions, what the table chooses
// under different weights, the file's round trip and its refusals (each message asserted), the
// shipped file, decisions on hand-built signal sequences (a timer just past the 1-minute
// keep-alive), online learning behind its flag and the manifest parameters.
#include "shoal/control/autoscaler/learned_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "signals_for_test.h"

namespace shoal {
namespace {

using testing::Interval;
using testing::Serve;

size_t ActionNamed(const LearnedModel& m, const std::string& name) {
  for (size_t a = 0; a < m.num_actions(); ++a)
    if (m.actions()[a].name == name) return a;
  ADD_FAILURE() << "no action " << name;
  return 0;
}

IdleHistory History(std::initializer_list<double> v) {
  IdleHistory h;
  h.idle_s.assign(v.begin(), v.end());
  return h;
}

IdlePeriod Period(const LearnedModel& m, const IdleHistory& h, double idle_s) {
  IdlePeriod p;
  p.state = m.StateOf(h);
  p.quantiles = m.QuantilesOf(h);
  p.history = static_cast<uint32_t>(h.idle_s.size());
  p.idle_s = idle_s;
  p.cold_start_s = 1;
  p.interval_s = 2;
  p.resume_arrivals = 1;
  p.burst_peak = 1;
  return p;
}

TEST(LearnedModel, ScoresEveryActionExactlyOnAFinishedIdlePeriod) {
  const LearnedModel m;
  const IdleHistory h = History({75, 75, 75, 75});
  const IdlePeriod p = Period(m, h, 75);
  // Keep 60 s: the instance goes at 60 s, the call at 75 s is cold.
  ActionCost c = m.Score(ActionNamed(m, "keep-1m"), p);
  EXPECT_TRUE(c.valid);
  EXPECT_DOUBLE_EQ(c.instance_s, 60);
  EXPECT_DOUBLE_EQ(c.cold_requests, 1);
  // Keep 2 min: warm, paid for the 75 s it waited.
  c = m.Score(ActionNamed(m, "keep-2m"), p);
  EXPECT_DOUBLE_EQ(c.instance_s, 75);
  EXPECT_DOUBLE_EQ(c.cold_requests, 0);
  // Pre-warm around the median (75 +- 10%): started at 67.5 - 1 s cold start - 2 s interval =
  // 64.5 s, ready at 65.5 s, warm at 75 s: 10.5 instance-seconds, no cold start.
  c = m.Score(ActionNamed(m, "prewarm-median+-10%"), p);
  EXPECT_TRUE(c.valid);
  EXPECT_DOUBLE_EQ(c.instance_s, 75 - 64.5);
  EXPECT_DOUBLE_EQ(c.cold_requests, 0);
  // The same window when the call comes at 30 s instead: nothing started yet, cold, free.
  c = m.Score(ActionNamed(m, "prewarm-median+-10%"), Period(m, h, 30));
  EXPECT_DOUBLE_EQ(c.instance_s, 0);
  EXPECT_DOUBLE_EQ(c.cold_requests, 1);
  // A pre-warm needs three idle periods of history; a relative keep needs one.
  const IdleHistory short_h = History({75});
  EXPECT_FALSE(m.Score(ActionNamed(m, "prewarm-q05..max"), Period(m, short_h, 75)).valid);
  c = m.Score(ActionNamed(m, "keep-max+15%"), Period(m, short_h, 75));
  EXPECT_TRUE(c.valid);
  EXPECT_DOUBLE_EQ(c.instance_s, 75);  // window 75 * 1.15 + 2 covers it
}

TEST(LearnedModel, ChoosesByTheWeightsGivenAtDecisionTime) {
  LearnedModel m;
  const IdleHistory h = History({75, 75, 75, 75, 75});
  for (int i = 0; i < 20; ++i) m.Learn(Period(m, h, 75));
  const size_t s = m.StateOf(h);
  LearnedWeights w;  // a cold request weighs as 300 instance-seconds
  ActionCost expected;
  const size_t a = m.Choose(s, w, 0, &expected);
  // Both pre-warm windows start at 67.5 s here; ties go to the earlier action.
  EXPECT_EQ(m.actions()[a].name, "prewarm-q05..max");
  EXPECT_DOUBLE_EQ(expected.cold_requests, 0);
  EXPECT_DOUBLE_EQ(expected.instance_s, 10.5);
  // Instance time all that matters: release at once.
  w.cost_weight = 1;
  w.cold_weight = 0;
  EXPECT_EQ(m.actions()[m.Choose(s, w, 3)].name, "keep-0s");
  // Too few samples anywhere: the fallback.
  const LearnedModel empty;
  EXPECT_EQ(empty.Choose(s, LearnedWeights{}, 3), 3u);
}

TEST(LearnedModel, RoundTripsByteForByte) {
  LearnedModel m;
  m.trained_on = "timer \"quoted\" (seeds 1..2)";
  m.seed = 7;
  for (double t : {12.5, 75.0, 75.0, 300.0, 0.1 + 0.2})
    m.Learn(Period(m, History({75, 80, 70}), t));
  m.mutable_sizing().Learn({3, 5, {0.1 + 0.2, 1, 2}, 7});
  m.mutable_sizing().Learn({11, 11, {1e-9, 0, 0.5}, 1});
  const std::string text = m.Serialize();
  auto back = LearnedModel::Parse(text, "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Serialize(), text);
  EXPECT_EQ(back->samples(), 5u);
  EXPECT_EQ(back->sizing().samples(), 8u);
  EXPECT_EQ(back->sizing().cells()[3 * 12 + 5].n, 7u);
  EXPECT_EQ(back->sizing().num_rows(), 17u);  // 12 contexts, 4 load rows, 1 global
  EXPECT_EQ(back->trained_on, m.trained_on);
  // Through a file too.
  const std::string path = ::testing::TempDir() + "learned-roundtrip.json";
  { std::ofstream(path, std::ios::binary) << text; }
  auto loaded = LearnedModel::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->Serialize(), text);
  std::remove(path.c_str());
}

// A policy file shipped in deploy/policies: its bytes and the model they parse to.
struct Shipped {
  std::string text;
  std::shared_ptr<const LearnedModel> model;
};

void LoadShipped(const char* path, const char* name, Shipped* out) {
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path;
  std::stringstream bytes;
  bytes << in.rdbuf();
  out->text = bytes.str();
  auto parsed = LearnedModel::Parse(out->text, name);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  out->model = std::make_shared<const LearnedModel>(*std::move(parsed));
}

TEST(LearnedModel, TheShippedFileIsCompiledInAndRoundTrips) {
  Shipped v2;
  ASSERT_NO_FATAL_FAILURE(LoadShipped(SHOAL_LEARNED_POLICY_FILE, "learned-v2.json", &v2));
  EXPECT_EQ(v2.model->version(), 2);
  EXPECT_TRUE(v2.model->has_sizing());
  EXPECT_GT(v2.model->samples(), 10000u);
  EXPECT_GT(v2.model->sizing().samples(), 100000u);
  EXPECT_EQ(v2.model->Serialize(), v2.text);
  EXPECT_EQ(LearnedModel::Default()->Serialize(), v2.text);
}

TEST(LearnedModel, AVersionOneFileIsReadAndSaysItsSizingIsShoals) {
  Shipped v1;
  ASSERT_NO_FATAL_FAILURE(LoadShipped(SHOAL_LEARNED_POLICY_V1_FILE, "learned-v1.json", &v1));
  EXPECT_EQ(v1.model->version(), 1);
  EXPECT_FALSE(v1.model->has_sizing());
  // It round-trips as version 1: same bytes, same checksum (the idle table's alone).
  EXPECT_EQ(v1.model->Serialize(), v1.text);
  LearnedParams p;
  p.model = v1.model;
  LearnedPolicy policy(p, ShoalParams{}, p.model);
  FunctionSignals s = Interval(2, 2, 1, 10);
  s.arrivals = 3;
  s.inflight = 1;
  policy.Observe(s);
  EXPECT_EQ(policy.sizing_action(), SizingTable::kDefaultAction);
  EXPECT_NE(policy.Explain().find("sizing x1.00-hold-10s (shoal's Erlang-C as is: the policy file "
                                  "is version 1, which has no sizing table)"),
            std::string::npos)
      << policy.Explain();
}

TEST(SizingTable, ChoosesAnotherActionOnlyWhenClearlyCheaperInTheContextsOwnRow) {
  SizingTable t;
  const size_t state = t.StateOf(0.1, 1.0, 8);
  const size_t def = SizingTable::kDefaultAction;
  const size_t wide = 8;  // x1.30-hold-2s
  ASSERT_EQ(t.actions()[wide].name, "x1.30-hold-2s");
  ASSERT_EQ(t.actions()[def].name, "x1.00-hold-10s");
  LearnedWeights w;  // 1/300 per inst-s, 1 per cold request, 1 per slo miss
  // No data: the default, with no estimate.
  SizingCost e{1, 1, 1};
  EXPECT_EQ(t.Choose(state, w, &e), def);
  EXPECT_EQ(e.instance_s, 0);
  // 4000 intervals each: default 2 inst-s + 0.01 cold per interval; wide 3 inst-s, no cold.
  t.Learn({state, def, {8000, 40, 0}, 4000});
  t.Learn({state, wide, {12000, 0, 0}, 4000});
  // Weighted per interval: default 2/300 + 0.01 = 0.01667, wide 3/300 = 0.01: wide, 40% less.
  EXPECT_EQ(t.Choose(state, w, &e), wide);
  EXPECT_DOUBLE_EQ(e.instance_s, 3);
  EXPECT_DOUBLE_EQ(e.cold_requests, 0);
  // Instance-seconds dearer (1/30): default 0.0767, wide 0.1: the default.
  w.cost_weight = 1.0 / 30;
  EXPECT_EQ(t.Choose(state, w), def);
  // Within the 3 % margin the default stays: wide 2% cheaper.
  SizingTable close;
  close.Learn({state, def, {3000, 0, 0}, 3000});
  close.Learn({state, wide, {2940, 0, 0}, 3000});
  EXPECT_EQ(close.Choose(state, LearnedWeights{}), def);
  // Too few intervals in a cell: not a candidate.
  SizingTable sparse;
  sparse.Learn({state, def, {3000, 30, 0}, 3000});
  sparse.Learn({state, wide, {10, 0, 0}, 10});
  EXPECT_EQ(sparse.Choose(state, LearnedWeights{}), def);
  // Another context does not borrow this one's choice (only its own row decides).
  EXPECT_EQ(t.Choose(t.StateOf(0.001, 1.0, 8), LearnedWeights{}), def);
  // The shipped context has no concurrency buckets: any concurrency is the same context.
  EXPECT_EQ(t.StateOf(0.1, 1.0, 1), state);
  EXPECT_EQ(t.num_states(), 12u);
  EXPECT_EQ(t.DescribeState(state), "load 0.05-0.2 instances, dispersion <1.2");
  SizingTable by_conc({2, 5});
  EXPECT_EQ(by_conc.num_states(), 36u);
  EXPECT_NE(by_conc.StateOf(0.1, 1.0, 1), by_conc.StateOf(0.1, 1.0, 8));
  EXPECT_EQ(by_conc.DescribeState(by_conc.StateOf(0.1, 1.0, 8)),
            "load 0.05-0.2 instances, dispersion <1.2, concurrency >=5");
  EXPECT_EQ(t.samples(), 8000u);
}

TEST(SizingFeatures, LoadAndDispersionOverTheLastTenMinutes) {
  FunctionSignals s;
  s.concurrency = 4;
  // Intervals first..last of `interval_s` each, arrivals(k) in interval k, into `f`.
  auto observe = [&s](SizingFeatures& f, int first, int last, double interval_s, double service_s,
                      double time_scale, auto arrivals) {
    s.interval_s = interval_s;
    for (int k = first; k <= last; ++k) {
      s.now_s = interval_s * k;
      s.arrivals = arrivals(k);
      f.Observe(s, service_s, time_scale);
    }
  };
  SizingFeatures f;
  // Steady 10 arrivals per 2 s interval for 20 minutes, 0.2 s service: 5/s x 0.2 / 4 = 0.25.
  observe(f, 1, 600, 2, 0.2, 1.0, [](int) { return 10; });
  EXPECT_NEAR(f.load(), 0.25, 1e-9);
  EXPECT_NEAR(f.dispersion(), 0, 1e-9);  // no interval differs from the last
  EXPECT_EQ(f.intervals(), 300u);        // ten minutes of 2 s intervals
  EXPECT_EQ(f.concurrency(), 4u);
  // Bursts: 40 arrivals every fourth interval, none between (same mean rate): dispersion
  // = mean squared difference / 2 / mean, about 40^2 x (2/4) / 2 / 10 = 40.
  observe(f, 601, 1200, 2, 0.2, 1.0, [](int k) { return k % 4 == 0 ? 40 : 0; });
  EXPECT_NEAR(f.load(), 0.25, 1e-9);
  EXPECT_NEAR(f.dispersion(), 40, 0.5);
  // timeScale 0.1: the same per-interval counts at 0.2 s intervals read as the same load.
  SizingFeatures g;
  observe(g, 1, 600, 0.2, 0.02, 0.1, [](int) { return 10; });
  EXPECT_NEAR(g.load(), 0.25, 1e-9);
}

void ExpectRefused(const std::string& text, const std::string& message) {
  auto r = LearnedModel::Parse(text, "f.json");
  ASSERT_FALSE(r.ok()) << "accepted: " << message;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().rfind("learned policy f.json: ", 0), 0u) << r.status().message();
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(LearnedModel, RefusesACorruptOrIncompatibleFileNamingWhatIsWrong) {
  LearnedModel m;
  for (int i = 0; i < 4; ++i) m.Learn(Period(m, History({75, 75, 75}), 75));
  const std::string good = m.Serialize();
  ExpectRefused(good.substr(0, good.size() / 2), "not valid JSON");
  ExpectRefused("[1, 2]", "not a JSON object");
  // Each edit of the good file, and what the refusal says.
  const struct {
    const char* from;
    const char* to;
    const char* message;
  } kEdits[] = {
      {"\"shoal-learned-policy\"", "\"something-else\"", "format is not \"shoal-learned-policy\""},
      {"\"version\": 2", "\"version\": 3",
       "version 3 is incompatible: this build reads versions 1 to 2 (retrain with "
       "`shoal sim train`)"},
      {"\"version\": 2", "\"version\": 0",
       "version 0 is incompatible: this build reads versions 1 to 2"},
      {"\"version\": 2", "\"version\": \"2\"", "no integer \"version\""},
      // The version-2 sizing section: required, checked like the idle table.
      {"\"sizing\": {", "\"sizing-old\": {",
       "version 2 needs a \"sizing\" object (the busy-time table)"},
      {"\"load_edges\": [0.01,", "\"load_edges\": [0.02,",
       "\"sizing.load_edges\" differs from this build's discretisation (retrain)"},
      {"\"x0.85-hold-2s\"", "\"x0.80-hold-2s\"",
       "\"sizing.actions\" differ from this build's action set (retrain)"},
      {"[[0, 0, 0, 0], ", "[[0, -1, 0, 0], ",
       "sizing.table[0][0] has a negative or non-finite sum"},
      {"[[0, 0, 0, 0], ", "[[0, 0, 0], ",
       "sizing.table[0][0] must be [intervals, instance_s, cold, slo_misses]"},
      {"\"version\": 2", "\"version\": 1",
       "\"sizing\" is a version-2 section but the file says version 1"},
      {"[15, 45, 90", "[15, 40, 90",
       "\"median_edges_s\" differs from this build's discretisation (retrain)"},
      {"\"keep-0s\"", "\"keep-1s\"", "\"actions\" differ from this build's action set (retrain)"},
  };
  for (const auto& e : kEdits) ExpectRefused(Replace(good, e.from, e.to), e.message);
  // A table edited by hand: the checksum names it.
  const size_t row = good.find("[[4, ");
  ASSERT_NE(row, std::string::npos);
  std::string edited = good;
  edited.replace(row, 5, "[[5, ");
  ExpectRefused(edited, "checksum mismatch (the table was edited or truncated");
  std::string negative = good;
  negative.replace(good.find("[0, 0, 0]"), 9, "[0, -1, 0]");
  ExpectRefused(negative, "table[0][0] has a negative or non-finite sum");
  std::string short_row = good;
  short_row.replace(good.find("[[0, 0, 0], "), 12, "[");
  ExpectRefused(short_row, "table row 0 must have 13 entries");
  // A missing file.
  auto missing = LearnedModel::Load("/nonexistent/learned.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "learned policy /nonexistent/learned.json: cannot open");
}

TEST(FunctionAutoscaler, LearnedPolicyFileAndWeightsFromTheManifest) {
  AutoscalingConfig c;
  c.policy = "learned";
  c.params = {{"costWeight", 0.01}, {"coldWeight", 2}, {"learnOnline", 1}};
  PolicyParams p;
  ASSERT_TRUE(BuildAutoscalingParams(c, &p, nullptr, nullptr).ok());
  EXPECT_DOUBLE_EQ(p.learned.weights.cost_weight, 0.01);
  EXPECT_DOUBLE_EQ(p.learned.weights.cold_weight, 2);
  EXPECT_TRUE(p.learned.learn_online);
  auto made = FunctionAutoscaler::Make(c);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(std::string((*made)->policy().name()), "learned");

  c.params = {{"learnOnline", 2}};
  EXPECT_EQ(BuildAutoscalingParams(c, nullptr, nullptr, nullptr).message(),
            "params.learnOnline: must be 0 or 1, got 2");
  c.params = {{"costWeight", -1}};
  EXPECT_EQ(BuildAutoscalingParams(c, nullptr, nullptr, nullptr).message(),
            "params: learned.cost_weight must be >= 0 (got -1)");
  c.params = {{"stableWindow", 30}};
  EXPECT_EQ(BuildAutoscalingParams(c, nullptr, nullptr, nullptr).message(),
            "params.stableWindow: not a parameter of policy learned (it is for kpa rl-q)");
  c.params.clear();
  c.policy_file = "/nonexistent/learned.json";
  auto bad = FunctionAutoscaler::Make(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "learned policy /nonexistent/learned.json: cannot open");
  c.policy = "kpa";
  EXPECT_EQ(BuildAutoscalingParams(c, nullptr, nullptr, nullptr).message(),
            "policyFile: only with policy learned (policy is kpa)");
}

FunctionSignals Tick(double now, uint64_t arrivals) {
  FunctionSignals s = Interval(now, 2, 1, 0);
  Serve(s, arrivals, arrivals ? 0.2 : 0);
  s.function = "f";
  s.cold_start_cost_s = 1;
  s.slo_s = 5;
  return s;
}

// A timer every 76 s, just past the 1-minute keep-alive (the Huawei study's case): after a few
// periods the shipped policy has an instance up when each call comes and releases it in
// between, where a 60 s keep-alive would let every call go cold.
TEST(LearnedPolicy, ATimerJustPastTheMinuteGetsAWindowCoveringIt) {
  LearnedPolicy policy(LearnedParams{}, ShoalParams{}, LearnedModel::Default());
  const double period = 76;
  int covered = 0, released = 0, calls = 0;
  for (double t = 2; t < 20 * period; t += 2) {
    const bool call = std::fmod(t, period) < 2;
    const ScalingDecision d = policy.Observe(Tick(t, call ? 1 : 0));
    const double since = std::fmod(t, period);  // idle time since the last call
    if (t < 5 * period) continue;               // history being learned
    if (call) ++calls;
    // The tick just before the call: an instance must be kept or pre-warmed.
    if (period - since <= 2 && period - since > 0) covered += d.replicas + d.prewarm >= 1;
    // Mid-period: nothing kept unless the action is a keep covering the period.
    if (since > 20 && since < 40) released += d.replicas + d.prewarm == 0;
  }
  ASSERT_NE(policy.current_action(), nullptr);
  EXPECT_EQ(covered, 15) << policy.Explain();
  EXPECT_GT(released, 100) << policy.Explain();  // pre-warm, not a 2-minute keep
  EXPECT_EQ(policy.current_action()->kind, LearnedAction::Kind::kPrewarm) << policy.Explain();
  EXPECT_NE(policy.Explain().find("prewarm"), std::string::npos) << policy.Explain();
  EXPECT_GE(calls, 14);
}

// timeScale 0.1 (time run 10x faster, as bench-autoscale-live does): a 7.6 s timer on a 0.2 s
// tick reads as the 76 s one on the table's clock and gets the same pre-warm window, scaled.
TEST(LearnedPolicy, TimeScaleReadsIdleTimesOnTheTrainingClock) {
  LearnedParams p;
  p.time_scale = 0.1;
  LearnedPolicy policy(p, ShoalParams{}, LearnedModel::Default());
  const double period = 7.6;
  int covered = 0;
  for (int k = 1; k < 760; ++k) {
    const double t = 0.2 * k;
    const double since = std::fmod(t + 1e-9, period);
    FunctionSignals s = Tick(t, since < 0.2 ? 1 : 0);
    s.interval_s = 0.2;
    s.cold_start_cost_s = 0.1;
    const ScalingDecision d = policy.Observe(s);
    if (t > 5 * period && period - since <= 0.2 + 1e-9) covered += d.replicas + d.prewarm >= 1;
  }
  ASSERT_NE(policy.current_action(), nullptr);
  EXPECT_EQ(policy.current_action()->kind, LearnedAction::Kind::kPrewarm) << policy.Explain();
  EXPECT_GE(covered, 14) << policy.Explain();
  EXPECT_EQ(policy.history().idle_s.size(), 18u);        // calls at 7.6, 15.2, ..., 144.4 s
  EXPECT_NEAR(policy.history().idle_s.back(), 76, 2.1);  // training-clock seconds
}

TEST(LearnedPolicy, LearnsOnlineOnlyWhenEnabled) {
  auto empty = std::make_shared<const LearnedModel>();
  LearnedParams on;
  on.learn_online = true;
  LearnedPolicy learning(on, ShoalParams{}, empty);
  LearnedPolicy fixed(LearnedParams{}, ShoalParams{}, empty);
  std::vector<IdlePeriod> seen;
  fixed.set_recorder(&seen);
  for (double t = 2; t < 1000; t += 2) {
    const uint64_t a = std::fmod(t, 100) < 2 ? 1 : 0;
    learning.Observe(Tick(t, a));
    fixed.Observe(Tick(t, a));
  }
  // Calls at 100, 200, ..., 900 s: eight idle periods ended.
  EXPECT_EQ(learning.model().samples(), 8u);
  EXPECT_EQ(fixed.model().samples(), 0u);
  EXPECT_EQ(empty->samples(), 0u);  // the shared table is never written
  ASSERT_EQ(seen.size(), 8u);
  EXPECT_DOUBLE_EQ(seen.back().idle_s, 100);
  // Its arrival rates when it began (after the call at 800 s): one call in the last minute, six
  // (300 .. 800 s) in the last ten.
  EXPECT_DOUBLE_EQ(seen.back().rate_1m, 1.0 / 60);
  EXPECT_DOUBLE_EQ(seen.back().rate_10m, 6.0 / 600);
  // With the table filled online, the learning policy stops going cold at 60 s.
  EXPECT_NE(learning.current_action()->name, "keep-1m") << learning.Explain();
}

}  // namespace
}  // namespace shoal
