#include "shoal/tools/simulator/workloads.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>

namespace shoal {
namespace {

struct Gaps {
  double mean = 0, cv = 0;
};
Gaps InterArrivals(const std::vector<Arrival>& a) {
  double s = 0, s2 = 0;
  for (size_t i = 1; i < a.size(); ++i) {
    const double g = a[i].t - a[i - 1].t;
    s += g;
    s2 += g * g;
  }
  const double n = static_cast<double>(a.size() - 1), m = s / n;
  return {m, std::sqrt(s2 / n - m * m) / m};
}

bool Sorted(const std::vector<Arrival>& a) {
  for (size_t i = 1; i < a.size(); ++i)
    if (a[i].t < a[i - 1].t) return false;
  return true;
}

TEST(Workloads, PoissonRateAndExponentialGaps) {
  auto a = Collect(*MakePoisson(2, 100, 1000, 1));
  EXPECT_NEAR(a.size(), 100'000, 1000);
  const Gaps g = InterArrivals(a);
  EXPECT_NEAR(g.mean, 0.01, 0.0002);
  EXPECT_NEAR(g.cv, 1.0, 0.02);
  EXPECT_EQ(a[0].function, 2u);
  EXPECT_LT(a.back().t, 1000);
  EXPECT_TRUE(Sorted(a));
}

TEST(Workloads, DiurnalMeanAndPeakToTrough) {
  const double mean = 50, amp = 0.8, period = 100;
  auto a = Collect(*MakeDiurnal(0, mean, amp, period, 1000, 2));
  EXPECT_NEAR(a.size(), 50'000, 1000);
  double high = 0, low = 0;
  for (const auto& x : a) (std::fmod(x.t, period) < period / 2 ? high : low) += 1;
  // Integrated rate over the rising and the falling half: 50 +- amp * 100 / pi.
  const double ratio = (50 + amp * 100 / std::numbers::pi) / (50 - amp * 100 / std::numbers::pi);
  EXPECT_NEAR(high / low, ratio, 0.1 * ratio);  // 3.07
}

TEST(Workloads, BurstyKeepsTheMeanRateAndIsBursty) {
  auto fixed = Collect(*MakeBursty(0, 100, 0.25, 0.25, 0, 2000, 3));
  EXPECT_NEAR(fixed.size(), 200'000, 4000);
  EXPECT_NEAR(InterArrivals(fixed).cv, 2.0, 0.1);  // gamma CV = 1 / sqrt(shape)
  auto shifting = Collect(*MakeBursty(0, 100, 0.1, 4, 10, 2000, 4));
  EXPECT_NEAR(shifting.size(), 200'000, 8000);
  EXPECT_GT(InterArrivals(shifting).cv, 1.3);
  // The shape shifts every 10 s: within-window CVs span bursty (shape 0.1: CV 3.2) to smooth
  // (shape 4: CV 0.5).
  double min_cv = 1e9, max_cv = 0;
  size_t begin = 0;
  for (int w = 0; w < 200; ++w) {
    size_t end = begin;
    while (end < shifting.size() && shifting[end].t < 10.0 * (w + 1)) ++end;
    if (end - begin > 50) {
      std::vector<Arrival> win(shifting.begin() + begin, shifting.begin() + end);
      const double cv = InterArrivals(win).cv;
      min_cv = std::min(min_cv, cv);
      max_cv = std::max(max_cv, cv);
    }
    begin = end;
  }
  EXPECT_LT(min_cv, 0.8);
  EXPECT_GT(max_cv, 2.0);
}

TEST(Workloads, ZipfPopularity) {
  auto a = Collect(*MakeZipf(10, 100, 1.0, 1000, 100, 5));
  EXPECT_NEAR(a.size(), 100'000, 1500);
  std::vector<double> n(100, 0);
  for (const auto& x : a) {
    ASSERT_GE(x.function, 10u);
    ASSERT_LT(x.function, 110u);
    n[x.function - 10] += 1;
  }
  double h = 0;
  for (int k = 1; k <= 100; ++k) h += 1.0 / k;  // 5.187
  EXPECT_NEAR(n[0] / a.size(), 1 / h, 0.03 / h);
  EXPECT_NEAR(n[1] / n[0], 0.5, 0.03);
  EXPECT_NEAR(n[9] / n[0], 0.1, 0.01);
}

TEST(Workloads, TimerAndFlRounds) {
  auto t = Collect(*MakeTimer(1, 61, 0, 600, 5));
  ASSERT_EQ(t.size(), 10u);  // 5, 66, ..., 554
  EXPECT_DOUBLE_EQ(t[3].t, 5 + 3 * 61);
  auto j = Collect(*MakeTimer(1, 60, 2, 600, 0, 9));
  ASSERT_EQ(j.size(), 10u);
  for (size_t k = 0; k < j.size(); ++k) {
    EXPECT_GE(j[k].t, 60.0 * k);
    EXPECT_LT(j[k].t, 60.0 * k + 2);
  }
  auto fl = Collect(*MakeFlRounds(3, 50, 30, 2, 4, 6));
  ASSERT_EQ(fl.size(), 200u);
  EXPECT_TRUE(Sorted(fl));
  for (size_t k = 0; k < fl.size(); ++k) {
    const double round = static_cast<double>(k / 50);
    EXPECT_GE(fl[k].t, 30 * round);
    EXPECT_LT(fl[k].t, 30 * round + 2);
  }
}

TEST(Workloads, MergeInterleavesInTimeOrder) {
  std::vector<std::unique_ptr<ArrivalSource>> s;
  s.push_back(MakePoisson(0, 10, 100, 1));
  s.push_back(MakeTimer(1, 7, 0, 100));
  s.push_back(FromVector({{50, 2, 0.3}, {5, 2, 0.1}}));  // unsorted input is sorted
  auto all = Collect(*Merge(std::move(s)));
  EXPECT_TRUE(Sorted(all));
  int twos = 0;
  for (const auto& a : all) twos += a.function == 2;
  EXPECT_EQ(twos, 2);
}

TEST(TraceReader, InvocationCsv) {
  auto t = ParseInvocationCsv(
      "timestamp,function,duration\r\n"
      "1.5,resize,0.2\r\n"
      "\n"
      "0.25,thumb,\n"
      "3,resize,1e-3\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->functions.size(), 2u);
  EXPECT_EQ(t->functions[0], "resize");
  ASSERT_EQ(t->arrivals.size(), 3u);
  EXPECT_EQ(t->arrivals[0].t, 0.25);  // sorted by time
  EXPECT_EQ(t->arrivals[0].function, 1u);
  EXPECT_LT(t->arrivals[0].service_s, 0);  // empty duration: sample
  EXPECT_DOUBLE_EQ(t->arrivals[2].service_s, 0.001);
}

void ExpectError(const Result<Trace>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(TraceReader, InvocationCsvErrorsNameTheLine) {
  ExpectError(ParseInvocationCsv("time,fn,dur\n1,a,1\n"), "line 1: expected the header");
  ExpectError(ParseInvocationCsv(""), "empty trace");
  ExpectError(ParseInvocationCsv("timestamp,function,duration\n1,a,1\n2,a\n"),
              "line 3: expected 3 fields");
  ExpectError(ParseInvocationCsv("timestamp,function,duration\nabc,a,1\n"),
              "line 2: timestamp 'abc'");
  ExpectError(ParseInvocationCsv("timestamp,function,duration\n1,a,-2\n"), "line 2: duration");
  ExpectError(ParseInvocationCsv("timestamp,function,duration\n1,,2\n"), "line 2: empty function");
  ExpectError(ParseInvocationCsv("timestamp,function,duration\n1,a,2x\n"), "line 2: duration '2x'");
}

TEST(TraceReader, AzureFunctionsCounts) {
  const std::string text =
      "HashOwner,HashApp,HashFunction,Trigger,1,2,3\n"
      "o1,a1,f1,http,3,0,2\n"
      "o2,a2,f2,timer,1,1,1\n"
      "o1,a1,f1,http,0,1,0\n";  // same function: merged
  auto t = ParseAzureFunctionsCounts(text, 42);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->functions.size(), 2u);
  EXPECT_EQ(t->triggers[1], "timer");
  ASSERT_EQ(t->arrivals.size(), 9u);
  EXPECT_TRUE(Sorted(t->arrivals));
  int per_minute[2][3] = {};
  for (const auto& a : t->arrivals) {
    ASSERT_GE(a.t, 0);
    ASSERT_LT(a.t, 180);
    ++per_minute[a.function][static_cast<int>(a.t / 60)];
  }
  EXPECT_EQ(per_minute[0][0], 3);
  EXPECT_EQ(per_minute[0][1], 1);
  EXPECT_EQ(per_minute[0][2], 2);
  EXPECT_EQ(per_minute[1][1], 1);
  auto again = ParseAzureFunctionsCounts(text, 42);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->arrivals[4].t, t->arrivals[4].t);  // deterministic from the seed
  // Uniform within a minute: 6000 arrivals in one minute average ~30 s.
  auto big =
      ParseAzureFunctionsCounts("HashOwner,HashApp,HashFunction,Trigger,1\no,a,f,http,6000\n", 1);
  ASSERT_TRUE(big.ok());
  double s = 0;
  for (const auto& a : big->arrivals) s += a.t;
  EXPECT_NEAR(s / 6000, 30, 0.5);
}

TEST(TraceReader, AzureErrorsNameTheLine) {
  ExpectError(ParseAzureFunctionsCounts("Owner,HashApp,HashFunction,Trigger,1\n", 1),
              "line 1: header column 1");
  ExpectError(ParseAzureFunctionsCounts("HashOwner,HashApp,HashFunction,Trigger,1,3\n", 1),
              "expected minute 2");
  ExpectError(
      ParseAzureFunctionsCounts(
          "HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1,2\no,a,g,http,1,x\n", 1),
      "line 3: minute 2 count 'x'");
  ExpectError(
      ParseAzureFunctionsCounts("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1\n", 1),
      "line 2: expected 6 fields, got 5");
  ExpectError(
      ParseAzureFunctionsCounts("HashOwner,HashApp,HashFunction,Trigger,1\no,a,f,http,-1\n", 1),
      "line 2: minute 1 count '-1'");
}

TEST(TraceReader, ReadsFilesOfEitherFormat) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream(dir + "/inv.csv") << "timestamp,function,duration\n0.5,a,0.1\n";
    std::ofstream(dir + "/azure.csv") << "HashOwner,HashApp,HashFunction,Trigger,1\no,a,f,http,2\n";
  }
  auto inv = ReadTraceFile(dir + "/inv.csv", 1);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->arrivals.size(), 1u);
  auto az = ReadTraceFile(dir + "/azure.csv", 1);
  ASSERT_TRUE(az.ok()) << az.status().ToString();
  EXPECT_EQ(az->arrivals.size(), 2u);
  auto missing = ReadTraceFile(dir + "/nope.csv", 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  std::remove((dir + "/inv.csv").c_str());
  std::remove((dir + "/azure.csv").c_str());
}

}  // namespace
}  // namespace shoal
