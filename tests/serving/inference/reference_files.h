// Reads the reference files tests/data/inference/gen_refs.py writes, with the standard library
// only, so the CUDA executor's tests on the GPU-only build (no protobuf, no oneDNN) check the
// same models against the same PyTorch outputs:
//   <model>.weights.bin  "SHWT", u32 count, per tensor: u32 name length, name, u32 rank,
//                        i64 dims[rank], f32 values (little-endian)
//   <model>.input.bin / <model>.output.bin  raw float32, batch-major
// Graphs: MlpGraph(784, {128}, 10), CnnGraph(8, 10), ResNetGraph({widths {8,16}, blocks {1,1},
// image 32, classes 10, small_stem}) with Graph::SetWeights(ReadReferenceWeights(...)), then
// FoldBatchNorm; batches 4, 3 and 2; fp32 max abs difference 1e-4.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace shoal::inference::testing {

// Empty on a missing or malformed file (the caller's comparison then fails loudly).
inline std::map<std::string, std::vector<float>, std::less<>> ReadReferenceWeights(
    const std::string& path) {
  std::map<std::string, std::vector<float>, std::less<>> out;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string b = s.str();
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (at + n > b.size()) return false;
    std::memcpy(dst, b.data() + at, n);
    at += n;
    return true;
  };
  char magic[4];
  uint32_t count = 0;
  if (!take(magic, 4) || std::memcmp(magic, "SHWT", 4) != 0 || !take(&count, 4)) return {};
  for (uint32_t t = 0; t < count; ++t) {
    uint32_t len = 0, rank = 0;
    if (!take(&len, 4) || at + len > b.size()) return {};
    std::string name = b.substr(at, len);
    at += len;
    if (!take(&rank, 4) || rank > 8) return {};
    uint64_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t dim = 0;
      if (!take(&dim, 8) || dim < 0 || dim > (int64_t{1} << 32)) return {};
      numel *= static_cast<uint64_t>(dim);
    }
    std::vector<float> v(numel);
    if (!take(v.data(), numel * sizeof(float))) return {};
    out[std::move(name)] = std::move(v);
  }
  return out;
}

}  // namespace shoal::inference::testing
