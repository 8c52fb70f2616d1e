#include "shoal/fl/robust/robust.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shoal/fl/kernels/fold.h"
#include "tests/support/temp_dir.h"

namespace shoal::aggregator {
namespace {

// Updates as rows of floats, plus the views the aggregator reads.
struct Updates {
  std::vector<std::vector<float>> rows;
  std::vector<UpdateRef> refs;

  explicit Updates(std::vector<std::vector<float>> r) : rows(std::move(r)) {
    for (const auto& row : rows) refs.push_back({row.data(), DType::kF32, row.size()});
  }
  [[nodiscard]] RobustInput Input() const { return RobustInput{refs}; }
  [[nodiscard]] size_t d() const { return rows[0].size(); }
};

Updates Random(size_t n, size_t d, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<std::vector<float>> rows(n, std::vector<float>(d));
  for (auto& row : rows) {
    for (auto& v : row) v = dist(rng);
  }
  return Updates(std::move(rows));
}

std::vector<float> RunRule(RobustAggregator& agg, const std::string& rule, const RobustInput& in,
                           RobustReport* report = nullptr) {
  std::vector<float> out(in.updates[0].n, -12345.0f);
  Result<RobustReport> r = InvalidArgument("unknown rule");
  if (rule == "median") r = agg.Median(in, out.data());
  if (rule == "trimmed") r = agg.TrimmedMean(in, 0.1, out.data());
  if (rule == "krum") r = agg.MultiKrum(in, 1, 0, out.data());
  if (rule == "clipped") r = agg.ClippedMean(in, out.data());
  if (rule == "flag") r = agg.Flag(in, FlagOptions{}, out.data());
  EXPECT_TRUE(r.ok()) << rule << ": " << r.status().ToString();
  if (report && r.ok()) *report = *r;
  return out;
}

TEST(RobustMedian, OddAndEvenCounts) {
  RobustAggregator agg(1);
  Updates odd({{1, 10, -3}, {5, 20, -1}, {3, 30, -2}});
  std::vector<float> out(3);
  auto r = agg.Median(odd.Input(), out.data());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(out, (std::vector<float>{3, 20, -2}));
  // Update 0 is never the median, 1 is at one coordinate (20), 2 at two (3, -2).
  EXPECT_EQ(r->weights, (std::vector<double>{0.0, 1.0 / 3, 2.0 / 3}));

  Updates even({{1, 4}, {2, 3}, {100, -7}, {3, 1}});
  std::vector<float> out2(2);
  auto r2 = agg.Median(even.Input(), out2.data());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(out2, (std::vector<float>{2.5f, 2.0f}));  // (2+3)/2, (1+3)/2
  // The middle values come from updates 1 and 3 at both coordinates; the outlier (100, -7) and
  // update 0 are never among them.
  EXPECT_EQ(r2->weights, (std::vector<double>{0.0, 1.0, 0.0, 1.0}));
  EXPECT_EQ(r2->excluded, (std::vector<size_t>{0, 2}));
}

TEST(RobustTrimmedMean, BetaEdges) {
  RobustAggregator agg(1);
  Updates u({{1}, {2}, {3}, {4}, {100}});
  float out = 0;
  // beta = 0: the plain mean.
  ASSERT_TRUE(agg.TrimmedMean(u.Input(), 0.0, &out).ok());
  EXPECT_FLOAT_EQ(out, 22.0f);
  // beta = 0.19: floor(0.95) = 0 dropped, still the mean.
  ASSERT_TRUE(agg.TrimmedMean(u.Input(), 0.19, &out).ok());
  EXPECT_FLOAT_EQ(out, 22.0f);
  // beta = 0.2: one dropped at each end: (2+3+4)/3.
  auto r = agg.TrimmedMean(u.Input(), 0.2, &out);
  ASSERT_TRUE(r.ok());
  EXPECT_FLOAT_EQ(out, 3.0f);
  EXPECT_EQ(r->excluded, (std::vector<size_t>{0, 4}));
  // beta = 0.49: two dropped at each end: the median.
  ASSERT_TRUE(agg.TrimmedMean(u.Input(), 0.49, &out).ok());
  EXPECT_FLOAT_EQ(out, 3.0f);

  auto bad = agg.TrimmedMean(u.Input(), 0.5, &out);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("beta"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("[0, 0.5)"), std::string::npos);
  EXPECT_FALSE(agg.TrimmedMean(u.Input(), -0.1, &out).ok());
}

TEST(RobustMultiKrum, SelectsTheHonestCluster) {
  RobustAggregator agg(1);
  // Five honest updates near (1, 1) and two far outliers; f = 2 (n = 7 > 2f + 2).
  Updates u({{1, 1}, {1.2f, 1}, {1, 1.2f}, {0.8f, 0.8f}, {50, -50}, {-40, 60}, {1.1f, 0.9f}});
  std::vector<float> out(2);
  auto r = agg.MultiKrum(u.Input(), 2, 3, out.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->weights[4], 0.0);
  EXPECT_EQ(r->weights[5], 0.0);
  // Scores (n - f - 2 = 3 nearest), by hand: update 0's squared distances to the others are
  // 0.04, 0.04, 0.08, ..., 0.02 -> 0.02 + 0.04 + 0.04 = 0.10.
  EXPECT_NEAR(r->krum_scores[0], 0.10, 1e-6);
  std::vector<size_t> chosen;
  for (size_t i = 0; i < 7; ++i) {
    if (r->weights[i] == 1) chosen.push_back(i);
  }
  ASSERT_EQ(chosen.size(), 3u);
  double sx = 0, sy = 0;
  for (size_t i : chosen) {
    sx += u.rows[i][0];
    sy += u.rows[i][1];
    EXPECT_LT(i, 7u);
    EXPECT_NE(i, 4u);
    EXPECT_NE(i, 5u);
  }
  EXPECT_NEAR(out[0], sx / 3, 1e-6);
  EXPECT_NEAR(out[1], sy / 3, 1e-6);
  EXPECT_EQ(r->excluded.size(), 4u);

  // m = 0: n - f updates.
  ASSERT_TRUE(agg.MultiKrum(u.Input(), 2, 0, out.data()).ok());
}

TEST(RobustMultiKrum, RefusesTooManyByzantine) {
  RobustAggregator agg(1);
  Updates u({{1}, {2}, {3}, {4}, {5}, {6}});
  float out;
  auto r = agg.MultiKrum(u.Input(), 2, 1, &out);  // 6 <= 2*2 + 2
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("n > 2f + 2"), std::string::npos) << r.status().message();
  EXPECT_TRUE(agg.MultiKrum(u.Input(), 1, 1, &out).ok());  // 6 > 4
  auto m = agg.MultiKrum(u.Input(), 1, 6, &out);           // m > n - f
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("m = 6"), std::string::npos) << m.status().message();
}

TEST(RobustClip, ExactNorms) {
  RobustAggregator agg(1);
  // Deltas from the reference (1, 1): (3, 4) norm 5, (0, 1) norm 1, (-6, 8) norm 10.
  Updates u({{4, 5}, {1, 2}, {-5, 9}});
  std::vector<float> ref = {1, 1};
  RobustInput in = u.Input();
  in.reference = ref.data();
  in.clip_norm = 2;
  std::vector<float> out(2);
  auto r = agg.ClippedMean(in, out.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->clip_scale[0], 2.0 / 5);
  EXPECT_DOUBLE_EQ(r->clip_scale[1], 1.0);
  EXPECT_DOUBLE_EQ(r->clip_scale[2], 2.0 / 10);
  EXPECT_EQ(r->clipped, (std::vector<size_t>{0, 2}));
  // Clipped deltas (1.2, 1.6), (0, 1), (-1.2, 1.6): mean (0, 4.2/3) + ref.
  EXPECT_NEAR(out[0], 1.0f, 1e-6);
  EXPECT_NEAR(out[1], 1.0f + 1.4f, 1e-6);

  // Clipping before the median: the clipped values are 2.2, 1, -0.2 and 2.6, 2, 2.6.
  auto med = agg.Median(in, out.data());
  ASSERT_TRUE(med.ok());
  EXPECT_NEAR(out[0], 1.0f, 1e-6);
  EXPECT_NEAR(out[1], 2.6f, 1e-6);

  in.clip_norm = 0;
  EXPECT_FALSE(agg.ClippedMean(in, out.data()).ok());
  in.clip_norm = -1;
  auto neg = agg.Median(in, out.data());
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("clip_norm"), std::string::npos);
}

// clip_to_median_norm clips each delta to the median of the deltas' norms: the same result and
// scales as clip_norm set to that median by hand, for every rule that clips.
TEST(RobustClip, ToTheMedianNormEqualsClipNormAtThatMedian) {
  Updates u = Random(7, 1001, 9);
  std::vector<float> ref(u.d(), 0.5f);
  for (size_t i = 0; i < u.rows.size(); ++i) {  // deltas of norms spread 1x .. 7x
    for (size_t j = 0; j < u.d(); ++j) u.rows[i][j] = 0.5f + u.rows[i][j] * float(i + 1);
  }
  std::vector<double> norms;
  for (const auto& row : u.rows) {
    double s = 0;
    for (size_t j = 0; j < u.d(); ++j) s += double(row[j] - 0.5f) * (row[j] - 0.5f);
    norms.push_back(std::sqrt(s));
  }
  std::vector<double> sorted = norms;
  std::sort(sorted.begin(), sorted.end());
  RobustInput adaptive = u.Input(), fixed = u.Input();
  adaptive.reference = fixed.reference = ref.data();
  adaptive.clip_to_median_norm = true;
  fixed.clip_norm = static_cast<float>(sorted[3]);
  RobustAggregator agg(2);
  for (const char* rule : {"clipped", "median", "krum", "flag"}) {
    RobustReport ra, rf;
    const auto a = RunRule(agg, rule, adaptive, &ra);
    const auto f = RunRule(agg, rule, fixed, &rf);
    ASSERT_EQ(ra.clip_scale.size(), 7u) << rule;
    for (size_t i = 0; i < 7; ++i) {
      EXPECT_NEAR(ra.clip_scale[i], rf.clip_scale[i], 1e-6) << rule << " " << i;
      EXPECT_NEAR(ra.clip_scale[i], std::min(1.0, sorted[3] / norms[i]), 1e-5) << rule << " " << i;
    }
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], f[j], 1e-5) << rule << " " << j;
  }
  EXPECT_EQ(agg.ClippedMean(u.Input(), std::vector<float>(u.d()).data()).status().message(),
            "clipped mean: clip_norm must be > 0 (or clip_to_median_norm set)");
}

TEST(RobustFlag, RankOneHonestSubspaceWithOutliers) {
  RobustAggregator agg(1);
  // Honest updates along e1 with different lengths, one outlier along e2.
  Updates u({{1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}, {0, 5, 0, 0}});
  std::vector<float> out(4);
  auto r = agg.Flag(u.Input(), FlagOptions{}, out.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Y = e1; Y Y^T mean = (1.5, 0, 0, 0).
  EXPECT_NEAR(out[0], 1.5f, 1e-5);
  EXPECT_NEAR(out[1], 0.0f, 1e-5);
  EXPECT_NEAR(out[2], 0.0f, 1e-6);
  EXPECT_NEAR(out[3], 0.0f, 1e-6);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(r->weights[i], 1.0, 1e-6);
  EXPECT_NEAR(r->weights[3], 0.0, 1e-6);
  EXPECT_GE(r->flag_iterations, 1);

  // Many honest updates spread around a direction u, a few outliers in random directions: the
  // aggregate stays along u and the outliers get the lowest weights.
  const size_t d = 200;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> dir(d);
  for (auto& v : dir) v = g(rng);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 9; ++i) {
    std::vector<float> row(d);
    const float s = 1.0f + 0.1f * static_cast<float>(i);
    for (size_t j = 0; j < d; ++j) row[j] = s * dir[j] + 0.01f * g(rng);
    rows.push_back(row);
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<float> row(d);
    for (auto& v : row) v = 20 * g(rng);
    rows.push_back(row);
  }
  Updates mixed(std::move(rows));
  std::vector<float> out2(d);
  auto r2 = agg.Flag(mixed.Input(), FlagOptions{}, out2.data());
  ASSERT_TRUE(r2.ok());
  double dot = 0, nn = 0, du = 0;
  for (size_t j = 0; j < d; ++j) {
    dot += out2[j] * dir[j];
    nn += out2[j] * out2[j];
    du += dir[j] * dir[j];
  }
  EXPECT_GT(dot / std::sqrt(nn * du), 0.999);
  for (int i = 0; i < 9; ++i) {
    for (int o = 9; o < 12; ++o) EXPECT_GT(r2->weights[i], r2->weights[o]);
  }
}

TEST(RobustFlag, RefusesBadOptions) {
  RobustAggregator agg(1);
  Updates u({{1, 0}, {0, 1}});
  std::vector<float> out(2);
  FlagOptions o;
  o.rank = 3;
  auto r = agg.Flag(u.Input(), o, out.data());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank"), std::string::npos);
  o.rank = 1;
  o.eps = 0;
  EXPECT_FALSE(agg.Flag(u.Input(), o, out.data()).ok());
}

TEST(Robust, RefusesMismatchedUpdates) {
  RobustAggregator agg(1);
  Updates u({{1, 2}, {3}});
  std::vector<float> out(2);
  auto r = agg.Median(u.Input(), out.data());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("update 1 has 1 elements"), std::string::npos)
      << r.status().message();
  RobustInput empty;
  EXPECT_FALSE(agg.Median(empty, out.data()).ok());
}

// Every rule (clipped only with a reference, `clip`) gives the same bytes, weights and Krum
// scores from `a` run by `agg_a` as from `b` run by `agg_b`.
void ExpectEveryRuleAgrees(RobustAggregator& agg_a, const RobustInput& a, RobustAggregator& agg_b,
                           const RobustInput& b, bool clip) {
  for (const char* rule : {"median", "trimmed", "krum", "clipped", "flag"}) {
    if (!clip && std::string(rule) == "clipped") continue;
    RobustReport ra, rb;
    const auto x = RunRule(agg_a, rule, a, &ra);
    const auto y = RunRule(agg_b, rule, b, &rb);
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)))
        << rule << " clip=" << clip;
    EXPECT_EQ(ra.weights, rb.weights) << rule;
    EXPECT_EQ(ra.krum_scores, rb.krum_scores) << rule;
  }
}

// Enough coordinates for many blocks and all pair ranges, and an odd tail.
TEST(Robust, SingleAndMultiThreadBitIdentical) {
  Updates u = Random(13, 70001, 1);
  std::vector<float> ref(u.d(), 0.25f);
  RobustAggregator one(1), four(4);
  for (bool clip : {false, true}) {
    RobustInput in = u.Input();
    if (clip) {
      in.reference = ref.data();
      in.clip_norm = 200;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectEveryRuleAgrees(one, in, four, in, clip));
  }
}

// An update given in parts (a SHU1 update's tensors, each where it sits, in its own dtype, part
// boundaries falling inside the rules' coordinate blocks) gives the result of the same values
// laid out flat; a part count that does not add up to n is refused.
TEST(Robust, UpdatesInPartsMatchFlatUpdates) {
  Updates f = Random(11, 5003, 5);
  std::vector<float> ref(f.d(), 0.1f);
  // Tensors of 700, 1 and 4302 elements; update 3's middle part in bf16 (its flat twin holds
  // the widened values).
  const size_t cut[] = {0, 700, 701, f.d()};
  std::vector<std::vector<float>> flat = f.rows;
  std::vector<std::vector<std::vector<float>>> pieces(11);
  std::vector<std::vector<uint16_t>> half(11);
  std::vector<std::vector<UpdatePart>> parts(11);
  std::vector<UpdateRef> refs;
  for (size_t i = 0; i < 11; ++i) {
    for (size_t p = 0; p < 3; ++p) {
      pieces[i].emplace_back(f.rows[i].begin() + static_cast<long>(cut[p]),
                             f.rows[i].begin() + static_cast<long>(cut[p + 1]));
    }
    if (i == 3) {
      half[i].resize(1);
      ConvertFromF32(half[i].data(), pieces[i][1].data(), DType::kBF16, 1);
      ConvertToF32(flat[i].data() + 700, half[i].data(), DType::kBF16, 1);
    }
    for (size_t p = 0; p < 3; ++p) {
      if (i == 3 && p == 1) {
        parts[i].push_back({half[i].data(), DType::kBF16, 1});
      } else {
        parts[i].push_back({pieces[i][p].data(), DType::kF32, pieces[i][p].size()});
      }
    }
    refs.emplace_back(std::span<const UpdatePart>(parts[i]), f.d());
  }
  Updates w(flat);
  RobustAggregator agg(2);
  for (bool clip : {false, true}) {
    RobustInput a{refs}, b = w.Input();
    if (clip) {
      a.reference = b.reference = ref.data();
      a.clip_norm = b.clip_norm = 60;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectEveryRuleAgrees(agg, a, agg, b, clip));
  }
  for (auto& r : refs) r.n = f.d() + 1;
  std::vector<float> out(f.d() + 1);
  auto bad = agg.Median(RobustInput{refs}, out.data());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "median: the parts of update 0 hold " + std::to_string(f.d()) +
                                        " elements, not its n = " + std::to_string(f.d() + 1));
}

// bf16 and f16 updates widen exactly, so the result equals the result on the widened floats.
TEST(Robust, HalfPrecisionInputsMatchWidenedFloats) {
  Updates f = Random(9, 3001, 2);
  RobustAggregator agg(2);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<std::vector<uint16_t>> half(9, std::vector<uint16_t>(f.d()));
    std::vector<std::vector<float>> widened(9, std::vector<float>(f.d()));
    std::vector<UpdateRef> refs;
    for (size_t i = 0; i < 9; ++i) {
      ConvertFromF32(half[i].data(), f.rows[i].data(), dt, f.d());
      ConvertToF32(widened[i].data(), half[i].data(), dt, f.d());
      refs.push_back({half[i].data(), dt, f.d()});
    }
    Updates w(widened);
    for (const char* rule : {"median", "trimmed", "krum", "flag"}) {
      const auto a = RunRule(agg, rule, RobustInput{refs});
      const auto b = RunRule(agg, rule, w.Input());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << rule << " " << DTypeName(dt);
    }
  }
}

std::vector<double> ReadDoubles(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<double> v;
  double x;
  while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  size_t bad = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    // 1e-5 relative, with a floor of 1e-5 of the vector's largest value for elements near 0.
    const double tol = 1e-5 * std::max(std::fabs(want[j]), 1e-2 * scale);
    if (std::fabs(got[j] - want[j]) > tol && bad++ < 5) {
      ADD_FAILURE() << what << "[" << j << "] = " << got[j] << ", numpy " << want[j];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

// n = 12: one partial group of 16 rows sorted in registers; n = 37: two full ones and a partial.
class RobustNumpy : public ::testing::TestWithParam<size_t> {};

TEST_P(RobustNumpy, MatchesNumpyReference) {
  if (access(SHOAL_PYTHON, X_OK) != 0) GTEST_SKIP() << "no " << SHOAL_PYTHON;
  const size_t n = GetParam(), d = 5003;
  Updates u = Random(n, d, 3);
  // Two outliers so the rules have something to do.
  for (auto& v : u.rows[10]) v *= 30;
  for (auto& v : u.rows[11]) v = -v * 5;
  std::vector<float> ref(d);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> ud(-1, 1);
  for (auto& v : ref) v = ud(rng);
  const shoal::testing::TempDir tmp("shoal-robust");
  const std::string base = tmp.path();
  {
    std::ofstream f(base + "/data", std::ios::binary);
    for (const auto& row : u.rows) f.write(reinterpret_cast<const char*>(row.data()), d * 4);
    std::ofstream r(base + "/ref", std::ios::binary);
    r.write(reinterpret_cast<const char*>(ref.data()), d * 4);
  }
  RobustAggregator agg(2);
  for (bool with_ref : {false, true}) {
    const float clip = with_ref ? 150.0f : 0.0f;
    const std::string out = base + (with_ref ? "/ref_out" : "/out");
    std::string cmd = std::string(SHOAL_PYTHON) + " " + SHOAL_ROBUST_REFERENCE_PY + " --data " +
                      base + "/data --n " + std::to_string(n) + " --d " + std::to_string(d) +
                      " --beta 0.1 --f 2 --m 0 --out " + out;
    if (with_ref) {
      cmd += " --ref ";
      cmd += base;
      cmd += "/ref --clip ";
      cmd += std::to_string(clip);
    }
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    RobustInput in = u.Input();
    if (with_ref) {
      in.reference = ref.data();
      in.clip_norm = clip;
    }
    const std::string tag = with_ref ? " (reference, clip)" : "";
    std::vector<float> got(d);
    ASSERT_TRUE(agg.Median(in, got.data()).ok());
    ExpectClose(got, ReadDoubles(out + ".median"), "median" + tag);
    ASSERT_TRUE(agg.TrimmedMean(in, 0.1, got.data()).ok());
    ExpectClose(got, ReadDoubles(out + ".trimmed"), "trimmed" + tag);
    auto k = agg.MultiKrum(in, 2, 0, got.data());
    ASSERT_TRUE(k.ok());
    ExpectClose(got, ReadDoubles(out + ".krum"), "krum" + tag);
    const auto scores = ReadDoubles(out + ".krum_scores");
    ASSERT_EQ(scores.size(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(k->krum_scores[i], scores[i], 1e-5 * scores[i]);
    auto fl = agg.Flag(in, FlagOptions{}, got.data());
    ASSERT_TRUE(fl.ok());
    ExpectClose(got, ReadDoubles(out + ".flag"), "flag" + tag);
    const auto cos2 = ReadDoubles(out + ".flag_cos2");
    ASSERT_EQ(cos2.size(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(fl->weights[i], cos2[i], 1e-6) << i;
    if (with_ref) {
      ASSERT_TRUE(agg.ClippedMean(in, got.data()).ok());
      ExpectClose(got, ReadDoubles(out + ".clipped"), "clipped" + tag);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, RobustNumpy, ::testing::Values(size_t{12}, size_t{37}));

}  // namespace
}  // namespace shoal::aggregator
