#include "shoal/tools/flsim/dataset.h"

#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>

namespace shoal::client {
namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr uint32_t kMaxIdxSamples = 10'000'000;   // refuse absurd headers before allocating

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

Result<GzFile> OpenGz(const std::string& path) {
  if (!std::filesystem::exists(path)) return NotFound(path + ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus("gzopen " + path, errno);
  gzbuffer(f, 1 << 17);
  return GzFile(f);
}

// Reads exactly `n` bytes; a short read means the file is truncated or corrupt.
Status ReadExact(gzFile f, const std::string& path, void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    unsigned chunk = n > (1U << 30) ? (1U << 30) : unsigned(n);
    int got = gzread(f, p, chunk);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return InvalidArgument(path + ": " + (msg != nullptr ? msg : "read error"));
    }
    if (got == 0) return InvalidArgument(path + ": truncated");
    p += got;
    n -= size_t(got);
  }
  return Status::Ok();
}

Result<uint32_t> ReadBigEndian32(gzFile f, const std::string& path) {
  unsigned char b[4];
  SHOAL_RETURN_IF_ERROR(ReadExact(f, path, b, 4));
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

Result<Dataset> LoadIdxDataset(const std::string& images_gz, const std::string& labels_gz,
                               int num_classes) {
  auto images = OpenGz(images_gz);
  if (!images) return images.status();
  auto labels = OpenGz(labels_gz);
  if (!labels) return labels.status();

  auto magic = ReadBigEndian32(images->get(), images_gz);
  if (!magic) return magic.status();
  if (*magic != kIdxImagesMagic) {
    return InvalidArgument(images_gz + ": not an IDX image file (magic " + Hex(*magic) + ", want " +
                           Hex(kIdxImagesMagic) + ")");
  }
  uint32_t dims[3];
  for (uint32_t& d : dims) {
    auto v = ReadBigEndian32(images->get(), images_gz);
    if (!v) return v.status();
    d = *v;
  }
  if (dims[0] == 0 || dims[0] > kMaxIdxSamples || dims[1] == 0 || dims[1] > 4096 || dims[2] == 0 ||
      dims[2] > 4096) {
    return InvalidArgument(images_gz + ": implausible dimensions " + std::to_string(dims[0]) + "x" +
                           std::to_string(dims[1]) + "x" + std::to_string(dims[2]));
  }

  auto lmagic = ReadBigEndian32(labels->get(), labels_gz);
  if (!lmagic) return lmagic.status();
  if (*lmagic != kIdxLabelsMagic) {
    return InvalidArgument(labels_gz + ": not an IDX label file (magic " + Hex(*lmagic) +
                           ", want " + Hex(kIdxLabelsMagic) + ")");
  }
  auto lcount = ReadBigEndian32(labels->get(), labels_gz);
  if (!lcount) return lcount.status();
  if (*lcount != dims[0]) {
    return InvalidArgument(labels_gz + ": " + std::to_string(*lcount) + " labels for " +
                           std::to_string(dims[0]) + " images in " + images_gz);
  }

  Dataset d;
  d.num_samples = dims[0];
  d.num_features = size_t(dims[1]) * dims[2];
  d.num_classes = num_classes;
  std::vector<uint8_t> pixels(d.num_samples * d.num_features);
  SHOAL_RETURN_IF_ERROR(ReadExact(images->get(), images_gz, pixels.data(), pixels.size()));
  d.labels.resize(d.num_samples);
  SHOAL_RETURN_IF_ERROR(ReadExact(labels->get(), labels_gz, d.labels.data(), d.labels.size()));
  for (size_t i = 0; i < d.num_samples; ++i) {
    if (d.labels[i] >= num_classes) {
      return InvalidArgument(labels_gz + ": label " + std::to_string(d.labels[i]) + " at index " +
                             std::to_string(i) + " is not below " + std::to_string(num_classes));
    }
  }
  d.features.resize(pixels.size());
  constexpr float kScale = 1.0F / 255.0F;
  for (size_t i = 0; i < pixels.size(); ++i) d.features[i] = float(pixels[i]) * kScale;
  return d;
}

Result<DatasetSplit> LoadFashionMnist(const std::string& dir, bool standardise) {
  const std::filesystem::path base(dir);
  const std::string names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  for (const auto& n : names) {
    if (!std::filesystem::exists(base / n)) {
      return NotFound("fashion-mnist not found at " + (base / n).string() +
                      ": install the Debian package dataset-fashion-mnist");
    }
  }
  DatasetSplit split;
  auto train = LoadIdxDataset((base / names[0]).string(), (base / names[1]).string());
  if (!train) return train.status();
  auto test = LoadIdxDataset((base / names[2]).string(), (base / names[3]).string());
  if (!test) return test.status();
  split.train = std::move(*train);
  split.test = std::move(*test);
  if (split.train.num_features != split.test.num_features) {
    return InvalidArgument("fashion-mnist at " + dir + ": train and test image sizes differ");
  }
  if (standardise) Standardise(split);
  return split;
}

void Standardise(DatasetSplit& split) {
  const auto& f = split.train.features;
  if (f.empty()) return;
  double sum = 0, sq = 0;
  for (float v : f) {
    sum += v;
    sq += double(v) * v;
  }
  const double mean = sum / double(f.size());
  const double var = sq / double(f.size()) - mean * mean;
  const float inv_sd = var > 0 ? float(1.0 / std::sqrt(var)) : 1.0F;
  const float m = float(mean);
  for (Dataset* d : {&split.train, &split.test}) {
    for (float& v : d->features) v = (v - m) * inv_sd;
  }
}

Dataset MakeSyntheticDataset(size_t num_samples, size_t num_features, int num_classes,
                             uint64_t seed, float noise) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0F, 1.0F);
  std::normal_distribution<float> gauss(0.0F, noise);
  std::vector<float> centers(size_t(num_classes) * num_features);
  for (float& c : centers) c = unit(rng);
  Dataset d;
  d.num_samples = num_samples;
  d.num_features = num_features;
  d.num_classes = num_classes;
  d.features.resize(num_samples * num_features);
  d.labels.resize(num_samples);
  for (size_t i = 0; i < num_samples; ++i) {
    const auto label = uint8_t(i % size_t(num_classes));  // balanced classes
    d.labels[i] = label;
    const float* c = centers.data() + size_t(label) * num_features;
    float* row = d.features.data() + i * num_features;
    for (size_t j = 0; j < num_features; ++j) row[j] = c[j] + gauss(rng);
  }
  return d;
}

Dataset Subset(const Dataset& data, std::span<const uint32_t> indices) {
  Dataset d;
  d.num_samples = indices.size();
  d.num_features = data.num_features;
  d.num_classes = data.num_classes;
  d.features.resize(indices.size() * data.num_features);
  d.labels.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const float* src = data.Row(indices[i]);
    std::copy(src, src + data.num_features, d.features.data() + i * data.num_features);
    d.labels[i] = data.labels[indices[i]];
  }
  return d;
}

Result<DatasetSplit> LoadDigits(const std::string& csv_gz) {
  auto f = OpenGz(csv_gz);
  if (!f.ok()) {
    return NotFound(f.status().message() + " (the digits come with python3-sklearn)");
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const int got = gzread(f->get(), buf, sizeof buf);
    if (got < 0) return InvalidArgument(csv_gz + ": read error");
    if (got == 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  constexpr size_t kPixels = 64;
  DatasetSplit split;
  for (Dataset* d : {&split.train, &split.test}) {
    d->num_features = kPixels;
    d->num_classes = 10;
  }
  size_t row = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (end == pos) {
      ++pos;
      continue;
    }
    float values[kPixels + 1];
    size_t n = 0;
    const char* p = text.data() + pos;
    const char* stop = text.data() + end;
    while (p < stop && n <= kPixels) {
      char* next = nullptr;
      const double v = std::strtod(p, &next);
      if (next == p) break;
      values[n++] = static_cast<float>(v);
      p = next;
      if (p < stop && *p == ',') ++p;
    }
    if (n != kPixels + 1 || p != stop || values[kPixels] < 0 || values[kPixels] > 9) {
      return InvalidArgument(csv_gz + ": line " + std::to_string(row + 1) +
                             ": want 64 pixels and a label 0-9");
    }
    Dataset& d = row % 5 == 4 ? split.test : split.train;
    for (size_t i = 0; i < kPixels; ++i) d.features.push_back(values[i] / 16.0f);
    d.labels.push_back(static_cast<uint8_t>(values[kPixels]));
    ++d.num_samples;
    ++row;
    pos = end + 1;
  }
  if (row == 0) return InvalidArgument(csv_gz + ": no rows");
  return split;
}

}  // namespace shoal::client
