#include "shoal/tools/flsim/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

namespace shoal::client {
namespace {

bool HaveFashionMnist() {
  return std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz");
}

// `split` loaded with `train` and `test` samples of `features` each, its features scaled to
// exactly [0, 1].
void ExpectSplit(const Result<DatasetSplit>& split, size_t train, size_t test, size_t features) {
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->train.num_samples, train);
  EXPECT_EQ(split->test.num_samples, test);
  EXPECT_EQ(split->train.num_features, features);
  EXPECT_EQ(split->train.features.size(), train * features);
  auto [lo, hi] = std::minmax_element(split->train.features.begin(), split->train.features.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
}

TEST(Digits, LoadsSklearnsCsvSplitEveryFifthRowToTest) {
  if (!std::filesystem::exists(kDigitsCsv)) GTEST_SKIP() << "python3-sklearn is not installed";
  auto split = LoadDigits();
  ASSERT_NO_FATAL_FAILURE(ExpectSplit(split, 1438, 359, 64));
  // Rows 0..3 are digits 0 1 2 3 (train); row 4 is a 4 (the first test row).
  EXPECT_EQ(split->train.labels[0], 0);
  EXPECT_EQ(split->train.labels[3], 3);
  EXPECT_EQ(split->test.labels[0], 4);
  EXPECT_FLOAT_EQ(split->train.features[2], 5.0f / 16.0f);  // row 0: 0,0,5,13,...
  EXPECT_EQ(LoadDigits("/nonexistent/digits.csv.gz").status().code(), StatusCode::kNotFound);
}

TEST(FashionMnist, LoadsCountsAndKnownLabels) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto split = LoadFashionMnist();
  ASSERT_NO_FATAL_FAILURE(ExpectSplit(split, 60000, 10000, 784));
  EXPECT_EQ(split->train.labels[0], 9);  // ankle boot
  EXPECT_EQ(split->test.labels[0], 9);
  EXPECT_EQ(split->train.labels[1], 0);  // t-shirt/top
  EXPECT_EQ(split->test.labels[1], 2);   // pullover
  // Balanced: 6000 per class in train.
  std::vector<size_t> counts(10, 0);
  for (uint8_t l : split->train.labels) ++counts[l];
  for (size_t c : counts) EXPECT_EQ(c, 6000U);
  // The pixel mean torchvision's Normalize uses.
  double mean = std::accumulate(split->train.features.begin(), split->train.features.end(), 0.0) /
                double(split->train.features.size());
  EXPECT_NEAR(mean, 0.2860, 5e-4);
}

TEST(FashionMnist, StandardiseUsesTrainMeanAndSd) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto split = LoadFashionMnist(kFashionMnistDir, /*standardise=*/true);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  double sum = 0, sq = 0;
  for (float v : split->train.features) {
    sum += v;
    sq += double(v) * v;
  }
  const double n = double(split->train.features.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(sq / n, 1.0, 1e-3);
  // A black pixel maps to -mean/sd = -0.2860/0.3530.
  EXPECT_NEAR(*std::min_element(split->test.features.begin(), split->test.features.end()),
              -0.2860 / 0.3530, 2e-3);
}

TEST(FashionMnist, MissingDirectoryNamesFileAndPackage) {
  auto split = LoadFashionMnist("/nonexistent/fmnist");
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), StatusCode::kNotFound);
  EXPECT_NE(split.status().message().find("/nonexistent/fmnist/train-images-idx3-ubyte.gz"),
            std::string::npos);
  EXPECT_NE(split.status().message().find("dataset-fashion-mnist"), std::string::npos);
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("shoal-idx-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
    return path;
  }
  static void Be32(std::vector<uint8_t>& v, uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
  }
  std::filesystem::path dir_;
};

TEST_F(IdxFiles, ReadsTinyFile) {
  std::vector<uint8_t> img, lab;
  Be32(img, 0x803);
  Be32(img, 2);
  Be32(img, 2);
  Be32(img, 2);
  for (uint8_t p : {0, 255, 51, 102, 1, 2, 3, 4}) img.push_back(p);
  Be32(lab, 0x801);
  Be32(lab, 2);
  lab.push_back(7);
  lab.push_back(3);
  auto d = LoadIdxDataset(Write("i.gz", img), Write("l.gz", lab));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_samples, 2U);
  EXPECT_EQ(d->num_features, 4U);
  EXPECT_FLOAT_EQ(d->features[1], 1.0F);
  EXPECT_FLOAT_EQ(d->features[2], 0.2F);
  EXPECT_EQ(d->labels[1], 3);
}

TEST_F(IdxFiles, RejectsBadMagicTruncationAndCountMismatch) {
  std::vector<uint8_t> img, lab, bad_lab;
  Be32(img, 0x803);
  Be32(img, 2);
  Be32(img, 2);
  Be32(img, 2);
  for (int i = 0; i < 7; ++i) img.push_back(1);  // one pixel short
  Be32(lab, 0x801);
  Be32(lab, 2);
  lab.push_back(1);
  lab.push_back(1);
  const auto images = Write("i.gz", img);
  auto d = LoadIdxDataset(images, Write("l.gz", lab));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("i.gz"), std::string::npos);

  d = LoadIdxDataset(Write("l2.gz", lab), Write("l3.gz", lab));  // labels where images belong
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("magic 0x00000801"), std::string::npos)
      << d.status().message();

  Be32(bad_lab, 0x801);
  Be32(bad_lab, 3);
  for (int i = 0; i < 3; ++i) bad_lab.push_back(0);
  d = LoadIdxDataset(images, Write("l4.gz", bad_lab));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("3 labels for 2 images"), std::string::npos)
      << d.status().message();
}

TEST(Synthetic, DeterministicAndBalanced) {
  auto a = MakeSyntheticDataset(100, 8, 4, 7);
  auto b = MakeSyntheticDataset(100, 8, 4, 7);
  auto c = MakeSyntheticDataset(100, 8, 4, 8);
  EXPECT_EQ(a.features, b.features);
  EXPECT_NE(a.features, c.features);
  EXPECT_EQ(a.features.size(), 800U);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(a.labels[i], i % 4);
  std::vector<uint32_t> idx = {5, 2};
  auto s = Subset(a, idx);
  EXPECT_EQ(s.num_samples, 2U);
  EXPECT_EQ(s.labels[0], a.labels[5]);
  EXPECT_EQ(s.features[8], a.features[16]);
}

}  // namespace
}  // namespace shoal::client
