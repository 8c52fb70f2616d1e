#include "shoal/tools/flsim/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

namespace shoal::client {
namespace {

// Fashion-MNIST-like labels: 60000 samples, 10 balanced classes, shuffled.
std::vector<uint8_t> BalancedLabels(size_t n, int classes, uint64_t seed) {
  std::vector<uint8_t> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = uint8_t(i % size_t(classes));
  std::mt19937_64 rng(seed);
  std::shuffle(labels.begin(), labels.end(), rng);
  return labels;
}

void ExpectEverySampleOnce(const std::vector<std::vector<uint32_t>>& parts, size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& p : parts) {
    for (uint32_t i : p) {
      ASSERT_LT(i, n);
      ++seen[i];
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
}

double MeanEntropy(const std::vector<uint8_t>& labels,
                   const std::vector<std::vector<uint32_t>>& parts) {
  double h = 0;
  for (const auto& p : parts) h += LabelEntropy(labels, p, 10);
  return h / double(parts.size());
}

TEST(PartitionSpec, Parses) {
  auto iid = ParsePartitionSpec("iid");
  ASSERT_TRUE(iid.ok());
  EXPECT_EQ(iid->kind, PartitionSpec::Kind::kIid);
  auto dir = ParsePartitionSpec("dirichlet:0.5");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->kind, PartitionSpec::Kind::kDirichlet);
  EXPECT_DOUBLE_EQ(dir->alpha, 0.5);
  EXPECT_EQ(ToString(*dir), "dirichlet:0.5");
  auto cls = ParsePartitionSpec("classes:2");
  ASSERT_TRUE(cls.ok());
  EXPECT_EQ(cls->classes_per_client, 2);
  EXPECT_EQ(ToString(*cls), "classes:2");
}

TEST(PartitionSpec, ErrorsNameTheBadPart) {
  auto bad = ParsePartitionSpec("dirichlet:abc");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // Each spec is refused, its message naming the part given ("": refused, message unchecked).
  const std::pair<const char*, const char*> kRefused[] = {
      {"dirichlet:abc", "\"abc\""}, {"dirichlet:-1", "\"-1\""}, {"dirichlet", ""},
      {"classes:0", "\"0\""},       {"shards:3", "\"shards\""}, {"iid:2", ""},
  };
  for (const auto& [spec, part] : kRefused) {
    bad = ParsePartitionSpec(spec);
    ASSERT_FALSE(bad.ok()) << spec;
    EXPECT_NE(bad.status().message().find(part), std::string::npos) << bad.status().message();
  }
}

TEST(Partition, IidIsBalancedAndCoversEverySample) {
  const auto labels = BalancedLabels(60000, 10, 1);
  auto parts = Partition(labels, 10, 16, {PartitionSpec::Kind::kIid}, 42);
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 16U);
  ExpectEverySampleOnce(*parts, labels.size());
  for (const auto& p : *parts) EXPECT_NEAR(double(p.size()), 3750.0, 1.0);
  EXPECT_GT(MeanEntropy(labels, *parts), std::log(10.0) - 0.01);
}

TEST(Partition, Dirichlet05IsNonIidAndCoversEverySampleOnce) {
  const auto labels = BalancedLabels(60000, 10, 1);
  PartitionSpec spec{PartitionSpec::Kind::kDirichlet, 0.5};
  auto parts = Partition(labels, 10, 16, spec, 42);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 16U);
  ExpectEverySampleOnce(*parts, labels.size());
  for (const auto& p : *parts) EXPECT_GE(p.size(), PartitionOptions{}.min_samples_per_client);

  auto iid = Partition(labels, 10, 16, {PartitionSpec::Kind::kIid}, 42);
  ASSERT_TRUE(iid.ok());
  const double h_dir = MeanEntropy(labels, *parts), h_iid = MeanEntropy(labels, *iid);
  // log(10) = 2.30 for iid; Dirichlet(0.5) concentrates each client on a few classes.
  EXPECT_LT(h_dir, h_iid - 0.4) << "dirichlet " << h_dir << " iid " << h_iid;

  // Deterministic from the seed, and a different seed gives a different split.
  auto again = Partition(labels, 10, 16, spec, 42);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *parts);
  auto other = Partition(labels, 10, 16, spec, 43);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *parts);
}

TEST(Partition, LargeAlphaIsNearlyIid) {
  const auto labels = BalancedLabels(60000, 10, 1);
  auto parts = Partition(labels, 10, 16, {PartitionSpec::Kind::kDirichlet, 1000.0}, 42);
  ASSERT_TRUE(parts.ok());
  ExpectEverySampleOnce(*parts, labels.size());
  EXPECT_GT(MeanEntropy(labels, *parts), std::log(10.0) - 0.01);
  for (const auto& p : *parts) EXPECT_NEAR(double(p.size()), 3750.0, 375.0);
}

TEST(Partition, TinyAlphaStillGivesEveryClientTheMinimum) {
  const auto labels = BalancedLabels(2000, 10, 3);
  PartitionOptions opts;
  opts.min_samples_per_client = 20;
  auto parts = Partition(labels, 10, 50, {PartitionSpec::Kind::kDirichlet, 0.01}, 5, opts);
  ASSERT_TRUE(parts.ok());
  ExpectEverySampleOnce(*parts, labels.size());
  for (const auto& p : *parts) EXPECT_GE(p.size(), 20U);
}

TEST(Partition, ClassesGivesEachClientKClasses) {
  const auto labels = BalancedLabels(60000, 10, 1);
  auto parts = Partition(labels, 10, 16, {PartitionSpec::Kind::kClasses, 0.5, 2}, 42);
  ASSERT_TRUE(parts.ok());
  ExpectEverySampleOnce(*parts, labels.size());  // 16 * 2 >= 10: every class is held
  for (const auto& p : *parts) {
    const auto counts = ClassCounts(labels, p, 10);
    int held = 0;
    for (size_t c : counts) held += c > 0 ? 1 : 0;
    EXPECT_EQ(held, 2);
  }
}

TEST(Partition, RejectsImpossibleRequests) {
  const auto labels = BalancedLabels(100, 10, 1);
  auto r = Partition(labels, 10, 0, {}, 1);
  EXPECT_FALSE(r.ok());
  r = Partition(labels, 10, 20, {}, 1);  // 20 clients * 10 minimum > 100 samples
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("100 samples"), std::string::npos) << r.status().message();
  r = Partition(labels, 10, 2, {PartitionSpec::Kind::kClasses, 0.5, 11}, 1);
  EXPECT_FALSE(r.ok());
  r = Partition(labels, 5, 2, {}, 1);  // label 9 is not a class of 5
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not below 5"), std::string::npos);
}

TEST(LabelEntropy, KnownValues) {
  std::vector<uint8_t> labels = {0, 0, 1, 1};
  std::vector<uint32_t> all = {0, 1, 2, 3}, one = {0, 1};
  EXPECT_NEAR(LabelEntropy(labels, all, 2), std::log(2.0), 1e-12);
  EXPECT_EQ(LabelEntropy(labels, one, 2), 0.0);
}

}  // namespace
}  // namespace shoal::client
