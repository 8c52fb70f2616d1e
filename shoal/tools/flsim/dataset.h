// Datasets a simulated FL client trains on: Fashion-MNIST read from the Debian package's IDX
// files (dataset-fashion-mnist), sklearn's 8x8 digits (python3-sklearn's digits.csv.gz), and a
// tiny synthetic set for fast tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::client {

// Where the Debian package dataset-fashion-mnist installs its files.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Samples as rows of float32 features (row-major [num_samples, num_features]) and uint8 labels.
struct Dataset {
  size_t num_samples = 0;
  size_t num_features = 0;
  int num_classes = 0;
  std::vector<float> features;
  std::vector<uint8_t> labels;

  const float* Row(size_t i) const { return features.data() + i * num_features; }
};

struct DatasetSplit {
  Dataset train;
  Dataset test;
};

// Reads an IDX image file (magic 0x00000803) and its label file (magic 0x00000801), both
// gzip-compressed. Pixels become float32 in [0, 1]. The counts must agree.
Result<Dataset> LoadIdxDataset(const std::string& images_gz, const std::string& labels_gz,
                               int num_classes = 10);

// Fashion-MNIST's train (60000) and test (10000) splits from `dir`.
// With `standardise`, both splits are shifted and scaled by the train split's pixel mean and
// standard deviation (one scalar each, as torchvision's Normalize((0.2860,), (0.3530,))).
Result<DatasetSplit> LoadFashionMnist(const std::string& dir = kFashionMnistDir,
                                      bool standardise = false);

// Where python3-sklearn installs the digits (1797 rows of 64 pixels in 0..16, then the label).
inline constexpr char kDigitsCsv[] =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

// The digits, pixels scaled to [0, 1]; every fifth row (i % 5 == 4) is the test split (359),
// the others the train split (1438): deterministic, and every class is in both.
Result<DatasetSplit> LoadDigits(const std::string& csv_gz = kDigitsCsv);

// x <- (x - mean) / stddev for every feature of both splits, with the train split's scalars.
void Standardise(DatasetSplit& split);

// Gaussian clusters, one per class, in [0,1]^num_features: separable for small `noise`.
Dataset MakeSyntheticDataset(size_t num_samples, size_t num_features, int num_classes,
                             uint64_t seed, float noise = 0.1F);

// The rows named by `indices`, in that order.
Dataset Subset(const Dataset& data, std::span<const uint32_t> indices);

}  // namespace shoal::client
