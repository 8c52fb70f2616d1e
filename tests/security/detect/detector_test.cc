// The detector's model on synthetic intervals: learning, robust z-scores (a few odd learning
// intervals do not widen the baseline), load changes that are not anomalies, the never-seen
// event rules, the once-per-episode reporting, and the profile's text form and its errors.
#include "shoal/security/detect/detector.h"

#include <gtest/gtest.h>

#include <random>

namespace shoal::detect {
namespace {

ModelOptions Options(uint32_t learn = 5) {
  ModelOptions o;
  o.learn_intervals = learn;
  o.allowed_paths = DefaultAllowedPaths();
  return o;
}

// A normal interval of an echo-like function: per request ~4 net syscalls, 1 futex, 20 us CPU.
Interval Normal(uint64_t requests, std::mt19937& rng, double seconds = 1.0) {
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  Interval iv;
  iv.seconds = seconds;
  iv.requests = requests;
  iv.syscalls[1] = static_cast<uint64_t>(4 * requests * jitter(rng)) + 2;
  iv.syscalls[4] = static_cast<uint64_t>(1 * requests * jitter(rng)) + 3;
  iv.syscalls[0] = static_cast<uint64_t>(0.1 * requests * jitter(rng));
  iv.cpu_ns = static_cast<uint64_t>(20000 * requests * jitter(rng)) + 50000;
  iv.bytes_sent = 64 * requests;
  iv.bytes_recv = 64 * requests;
  return iv;
}

// Learns `n` intervals of one instance with load varying between 100 and 3000 requests.
void Learn(Detector& d, const std::string& fn, uint32_t n, std::mt19937& rng,
           std::vector<Event> events = {}) {
  for (uint32_t t = 0; t < n; ++t) {
    auto a = d.Observe(fn, 1, t, Normal(100 + (t * 977) % 2900, rng), events);
    EXPECT_TRUE(a.empty());
  }
}

TEST(Detector, LearnsThenScoresAndAcceptsALoadChange) {
  std::mt19937 rng(1);
  Detector d(Options(5));
  EXPECT_EQ(d.State("echo"), "");
  Learn(d, "echo", 5, rng);
  EXPECT_EQ(d.State("echo"), "learning (5 of 5 intervals)");
  EXPECT_FALSE(d.Learned("echo"));
  // Tick 5: the baseline is made; a normal interval at a load never seen is no anomaly, nor
  // is an idle one.
  EXPECT_TRUE(d.Observe("echo", 1, 5, Normal(20000, rng), {}).empty());
  EXPECT_TRUE(d.Learned("echo"));
  EXPECT_EQ(d.State("echo"), "scoring (baseline of 5 intervals, 5 samples)");
  EXPECT_TRUE(d.Observe("echo", 1, 6, Normal(0, rng), {}).empty());
  EXPECT_TRUE(d.Observe("echo", 2, 6, Normal(1, rng), {}).empty());
  EXPECT_EQ(d.FinishedLearning(), std::vector<std::string>{"echo"});
  EXPECT_TRUE(d.FinishedLearning().empty());
}

TEST(Detector, CpuBurnIsACpuAnomalyOncePerEpisode) {
  std::mt19937 rng(2);
  Detector d(Options(5));
  Learn(d, "echo", 5, rng);
  Interval burn = Normal(3, rng);
  burn.cpu_ns += 900'000'000;  // 0.9 s of CPU in a 1 s interval
  auto a = d.Observe("echo", 1, 5, burn, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "cpu");
  EXPECT_GT(a[0].score, 8);
  EXPECT_NE(a[0].evidence.find("cpu: 900."), std::string::npos) << a[0].evidence;
  EXPECT_NE(a[0].evidence.find("over 3 request(s)"), std::string::npos) << a[0].evidence;
  // Still burning: the same episode, not reported again; another instance is its own.
  EXPECT_TRUE(d.Observe("echo", 1, 6, burn, {}).empty());
  EXPECT_EQ(d.Observe("echo", 2, 6, burn, {}).size(), 1u);
  // A clean interval ends the episode; the next burn is reported.
  EXPECT_TRUE(d.Observe("echo", 1, 7, Normal(3, rng), {}).empty());
  EXPECT_EQ(d.Observe("echo", 1, 8, burn, {}).size(), 1u);
}

TEST(Detector, SmallExcessBelowTheAbsoluteFloorIsNoAnomaly) {
  std::mt19937 rng(3);
  Detector d(Options(5));
  Learn(d, "echo", 5, rng);
  Interval iv = Normal(0, rng);
  iv.syscalls[2] += 20;     // 20 process syscalls: a huge z over ~0, but below 200/s
  iv.cpu_ns += 50'000'000;  // 50 ms: below a quarter core
  EXPECT_TRUE(d.Observe("echo", 1, 5, iv, {}).empty());
  iv.syscalls[2] += 500;
  auto a = d.Observe("echo", 1, 6, iv, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "syscalls");
  EXPECT_NE(a[0].evidence.find("syscalls_process"), std::string::npos);
}

// detect_syscalls: sampled: the syscall classes are counted in a slice of the interval, and
// they and the requests finished in the slice are scaled to the whole of it; an interval whose
// slice missed the instance teaches and scores nothing about syscalls (the rest still counts).
TEST(Detector, SampledSyscallCountsAreScaledToTheInterval) {
  Interval iv;
  iv.seconds = 5.0;
  iv.requests = 9;
  iv.syscalls[1] = 100;
  iv.syscall_seconds = 0.5;  // counted in a tenth of the interval, in which no request finished
  iv.cpu_ns = 1000;
  EXPECT_DOUBLE_EQ(FeatureCounts(iv)[1], 1000.0);
  EXPECT_DOUBLE_EQ(FeatureValues(iv)[1], 1000.0);  // 1000 / (0 * 10 + 1)
  iv.syscall_requests = 99;
  EXPECT_DOUBLE_EQ(FeatureValues(iv)[1], 1000.0 / 991.0);  // 99 in the slice: 990 in the interval
  EXPECT_DOUBLE_EQ(FeatureCounts(iv)[kSyscallClasses], 1000.0);  // CPU is not scaled
  EXPECT_DOUBLE_EQ(FeatureValues(iv)[kSyscallClasses], 100.0);   // per the interval's 9 + 1
  iv.syscall_seconds = -1;                                       // counted over the whole interval
  EXPECT_DOUBLE_EQ(FeatureCounts(iv)[1], 100.0);
  EXPECT_DOUBLE_EQ(FeatureValues(iv)[1], 10.0);
  iv.syscall_seconds = 5.0;
  EXPECT_DOUBLE_EQ(FeatureCounts(iv)[1], 100.0);
  EXPECT_TRUE(SyscallsCounted(iv));
  iv.syscall_seconds = 0;
  EXPECT_FALSE(SyscallsCounted(iv));

  // Learned from sampled intervals (a tenth each), some not sampled at all.
  std::mt19937 rng(7);
  Detector d(Options(6));
  auto sampled = [&](uint64_t requests) {
    Interval n = Normal(requests, rng);
    n.syscall_seconds = 0.1;
    n.syscall_requests = requests / 10;
    for (auto& c : n.syscalls) c /= 10;
    return n;
  };
  for (uint32_t t = 0; t < 6; ++t) {
    Interval n = sampled(1000);
    if (t % 3 == 2) {
      n.syscall_seconds = 0;  // the slice missed it
      n.syscalls = {};
    }
    EXPECT_TRUE(d.Observe("echo", 1, t, n, {}).empty());
  }
  ASSERT_TRUE(d.Observe("echo", 1, 6, sampled(1000), {}).empty());  // the baseline is made
  // Unsampled intervals taught nothing: the net median is ~4 per request, not pulled to 0.
  const Baseline* b = d.BaselineOf("echo");
  ASSERT_NE(b, nullptr);
  EXPECT_NEAR(b->median(1), 4.0, 0.5);
  EXPECT_EQ(b->samples(), 6u);
  // The slice saw the load while most of the interval was idle (150 requests in the interval,
  // 100 of them in the slice): per request the same, no anomaly.
  Interval burst = sampled(1000);
  burst.requests = 150;
  EXPECT_TRUE(d.Observe("echo", 1, 7, burst, {}).empty());
  // A 10x net flood seen in the slice is one, scaled.
  Interval flood = sampled(1000);
  flood.syscalls[1] *= 10;
  auto a = d.Observe("echo", 1, 8, flood, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "syscalls");
  EXPECT_NE(a[0].evidence.find("syscalls_net: "), std::string::npos) << a[0].evidence;
  EXPECT_NE(a[0].evidence.find("(sampled: counted in 0.10 s over 100 request(s), both scaled)"),
            std::string::npos)
      << a[0].evidence;
  // The same flood in an interval the slice missed: not scored (the counts are not known).
  flood.syscall_seconds = 0;
  EXPECT_TRUE(d.Observe("echo", 2, 9, flood, {}).empty());
}

TEST(Detector, MedianAndMadResistOddLearningIntervals) {
  std::mt19937 rng(4);
  Detector d(Options(9));
  for (uint32_t t = 0; t < 9; ++t) {
    Interval iv = Normal(1000, rng);
    if (t == 3) iv.cpu_ns *= 50;  // one outlier while learning (a GC pause, a cold cache)
    d.Observe("echo", 1, t, iv, {});
  }
  d.Observe("echo", 1, 9, Normal(1000, rng), {});
  const Baseline* b = d.BaselineOf("echo");
  ASSERT_TRUE(b && b->learned());
  const int cpu = kSyscallClasses;
  // Median ~ 20 us + 50 us/1001 per request, MAD a few percent of it: the outlier is ignored.
  EXPECT_NEAR(b->median(cpu), 20000, 2500);
  EXPECT_LT(b->mad(cpu), 2500);
}

TEST(Detector, NeverSeenEventsAreAnomaliesSeenOnesAndAllowedPathsAreNot) {
  std::mt19937 rng(5);
  Detector d(Options(3));
  d.SetAllowedPaths("infer", {"/var/lib/shoal/models/"});
  Learn(d, "infer", 3, rng,
        {{EventKind::kConnect, "127.0.0.1:8080"}, {EventKind::kOpen, "/etc/hosts"}});
  std::vector<Event> events = {
      {EventKind::kConnect, "127.0.0.1:8080"},                    // learned
      {EventKind::kOpen, "/etc/hosts"},                           // learned
      {EventKind::kOpen, "/usr/lib/x86_64-linux-gnu/libm.so.6"},  // allowed by default
      {EventKind::kOpen, "/var/lib/shoal/models/m.onnx"},         // allowed by the manifest
      {EventKind::kExec, "/bin/sh"},
      {EventKind::kConnect, "127.0.0.1:4444"},
      {EventKind::kOpen, "/etc/shadow"},
  };
  auto a = d.Observe("infer", 1, 3, Normal(10, rng), events);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].kind, "exec");
  EXPECT_EQ(a[0].evidence, "execve /bin/sh (never seen while learning)");
  EXPECT_EQ(a[1].kind, "connect");
  EXPECT_EQ(a[1].evidence, "connect to 127.0.0.1:4444 (a destination never seen while learning)");
  EXPECT_EQ(a[2].kind, "file");
  EXPECT_EQ(a[2].evidence,
            "open /etc/shadow (outside the allowed paths, never seen while learning)");
  // The same events again from the same instance: already reported.
  EXPECT_TRUE(d.Observe("infer", 1, 4, Normal(10, rng), events).empty());
  // Another function learned nothing of these: its own baseline.
  Learn(d, "other", 3, rng);
  EXPECT_EQ(d.Observe("other", 7, 3, Normal(10, rng), {{EventKind::kOpen, "/etc/hosts"}}).size(),
            1u);
}

TEST(Detector, ProfileRoundTripsAndScoresFromTheFirstInterval) {
  std::mt19937 rng(6);
  Detector d(Options(3));
  Learn(d, "echo", 3, rng, {{EventKind::kConnect, "unix:/run/x.sock"}});
  d.Observe("echo", 1, 3, Normal(10, rng), {});
  const std::string profile = d.Profile("echo");
  ASSERT_FALSE(profile.empty());
  EXPECT_EQ(profile.rfind("shoal-detect-profile v1\nintervals 3\nfeature syscalls_file ", 0), 0u)
      << profile;
  EXPECT_NE(profile.find("\nconnect unix:/run/x.sock\n"), std::string::npos);

  Detector fresh(Options(100));
  ASSERT_TRUE(fresh.LoadProfile("echo", profile).ok());
  EXPECT_EQ(fresh.State("echo"), "scoring (saved profile)");
  EXPECT_TRUE(
      fresh.Observe("echo", 9, 0, Normal(10, rng), {{EventKind::kConnect, "unix:/run/x.sock"}})
          .empty());
  auto a = fresh.Observe("echo", 9, 1, Normal(10, rng), {{EventKind::kExec, "/usr/bin/curl"}});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "exec");
  EXPECT_EQ(fresh.Profile("echo"), profile);
}

TEST(Detector, BadProfilesAreRefusedNamingTheLine) {
  Detector d(Options());
  auto st = d.LoadProfile("f", "hello\n");
  EXPECT_EQ(st.message(),
            "not a detector profile: the first line must be 'shoal-detect-profile v1'");
  st = d.LoadProfile("f", "shoal-detect-profile v1\nfeature cpu x y\n");
  EXPECT_EQ(st.message(), "detector profile line 2: feature <name> <median> <mad>");
  st = d.LoadProfile("f", "shoal-detect-profile v1\nfeature gpu 1 1\n");
  EXPECT_EQ(st.message(), "detector profile line 2: unknown feature 'gpu'");
  st = d.LoadProfile("f", "shoal-detect-profile v1\nbogus 1\n");
  EXPECT_EQ(st.message(),
            "detector profile line 2: expected feature, exec, connect or file, got 'bogus'");
  st = d.LoadProfile("f", "shoal-detect-profile v1\nfeature cpu 1 1\n");
  EXPECT_EQ(st.message(), "detector profile: feature syscalls_file is missing");
  EXPECT_EQ(d.State("f"), "learning (0 of 5 intervals)");
}

TEST(Detector, PathAllowedMatchesPrefixesAndExactPaths) {
  const std::vector<std::string> allowed = {"/dev/shm/", "/dev/null"};
  EXPECT_TRUE(PathAllowed(allowed, "/dev/shm/shoal-pool"));
  EXPECT_TRUE(PathAllowed(allowed, "/dev/null"));
  EXPECT_FALSE(PathAllowed(allowed, "/dev/nullx"));
  EXPECT_FALSE(PathAllowed(allowed, "/dev/shmx"));
  EXPECT_FALSE(PathAllowed(allowed, "relative/dev/shm/x"));
}

}  // namespace
}  // namespace shoal::detect
