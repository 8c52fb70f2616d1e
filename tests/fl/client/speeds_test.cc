#include "shoal/tools/flsim/speeds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace shoal::client {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double Mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

TEST(SpeedSpec, ParsesEachDistribution) {
  // Each spec and the distribution it reads as; what a spec leaves out keeps its default.
  using K = SpeedSpec::Kind;
  const std::pair<const char*, SpeedSpec> kParsed[] = {
      {"lognormal:1.0", {K::kLognormal, 1.0, kDefaultStepSeconds}},
      {"lognormal:0.5,0.2", {K::kLognormal, 0.5, 0.2}},
      {"exponential:0.1", {K::kExponential, 0.1, kDefaultStepSeconds}},
      {"normal:0.05,0.02", {K::kNormal, 0.05, 0.02}},
      {"uniform", {K::kUniform, kDefaultStepSeconds, kDefaultStepSeconds}},
      {"uniform:0.01,0.1", {K::kUniform, 0.01, 0.1}},
  };
  for (const auto& [spec, want] : kParsed) {
    auto s = ParseSpeedSpec(spec);
    ASSERT_TRUE(s.ok()) << spec << ": " << s.status().message();
    EXPECT_EQ(s->kind, want.kind) << spec;
    EXPECT_DOUBLE_EQ(s->a, want.a) << spec;
    EXPECT_DOUBLE_EQ(s->b, want.b) << spec;
  }
}

TEST(SpeedSpec, ErrorsNameTheBadPart) {
  // Each spec is refused, its message naming the part given ("": refused, message unchecked).
  const std::pair<const char*, const char*> kRefused[] = {
      {"lognormal:x", "\"x\""}, {"normal:0.05", "normal:<mean>,<sd>"},
      {"gamma:2", "\"gamma\""}, {"exponential:0", ""},
      {"uniform:0.2,0.1", ""},  {"normal:0.05,-1", "argument 2"},
  };
  for (const auto& [spec, part] : kRefused) {
    auto s = ParseSpeedSpec(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_NE(s.status().message().find(part), std::string::npos) << s.status().message();
  }
}

TEST(SampleStepSeconds, MatchesTheDistributions) {
  constexpr int kN = 20000;
  auto ln = SampleStepSeconds({SpeedSpec::Kind::kLognormal, 1.0, 0.05}, kN, 1);
  ASSERT_EQ(ln.size(), size_t(kN));
  EXPECT_NEAR(Median(ln), 0.05, 0.003);
  EXPECT_NEAR(Mean(ln), 0.05 * std::exp(0.5), 0.004);  // E = median * exp(sigma^2 / 2)

  auto ex = SampleStepSeconds({SpeedSpec::Kind::kExponential, 0.1, 0}, kN, 1);
  EXPECT_NEAR(Mean(ex), 0.1, 0.004);
  EXPECT_GE(*std::min_element(ex.begin(), ex.end()), kMinStepFraction * 0.1);

  auto no = SampleStepSeconds({SpeedSpec::Kind::kNormal, 0.05, 0.05}, kN, 1);
  EXPECT_GE(*std::min_element(no.begin(), no.end()), kMinStepFraction * 0.05);  // clamped
  EXPECT_NEAR(Median(no), 0.05, 0.002);

  auto same = SampleStepSeconds(ParseSpeedSpec("uniform").value(), 16, 1);
  for (double v : same) EXPECT_EQ(v, kDefaultStepSeconds);
  auto un = SampleStepSeconds({SpeedSpec::Kind::kUniform, 0.01, 0.1}, kN, 1);
  EXPECT_GE(*std::min_element(un.begin(), un.end()), 0.01);
  EXPECT_LE(*std::max_element(un.begin(), un.end()), 0.1);
}

TEST(SampleStepSeconds, DeterministicFromSeed) {
  const SpeedSpec spec = ParseSpeedSpec("lognormal:1.0").value();
  EXPECT_EQ(SampleStepSeconds(spec, 16, 9), SampleStepSeconds(spec, 16, 9));
  EXPECT_NE(SampleStepSeconds(spec, 16, 9), SampleStepSeconds(spec, 16, 10));
}

}  // namespace
}  // namespace shoal::client
