#include "shoal/fl/algorithms/model_state.h"

#include <bit>
#include <cstring>
#include <string>

namespace shoal::aggregator {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are little-endian; add byte swapping for this host");

constexpr char kMagic[4] = {'S', 'H', 'M', 'S'};
constexpr uint32_t kFormat = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 3 * 8;

// Writes at a cursor into a buffer sized up front (vector::insert trips GCC 12's bogus
// -Warray-bounds at -O3).
class Writer {
 public:
  explicit Writer(uint8_t* p) : p_(p) {}
  void Bytes(const void* src, size_t n) {
    if (n != 0) std::memcpy(p_, src, n);
    p_ += n;
  }
  template <typename T>
  void Value(const T& v) {
    Bytes(&v, sizeof(T));
  }
  void Floats(const std::vector<float>& v) { Bytes(v.data(), v.size() * sizeof(float)); }

 private:
  uint8_t* p_;
};

template <typename T>
T Read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::vector<uint8_t> ModelState::Serialize() const {
  std::vector<uint8_t> out(
      kHeaderBytes + (weights.size() + momentum.size() + second_moment.size()) * sizeof(float));
  Writer w(out.data());
  w.Bytes(kMagic, sizeof(kMagic));
  w.Value(kFormat);
  w.Value(version);
  w.Value(static_cast<uint64_t>(weights.size()));
  w.Value(static_cast<uint64_t>(momentum.size()));
  w.Value(static_cast<uint64_t>(second_moment.size()));
  w.Floats(weights);
  w.Floats(momentum);
  w.Floats(second_moment);
  return out;
}

Result<ModelState> ModelState::Deserialize(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return InvalidArgument("model checkpoint: not a Shoal model state (bad magic or too short)");
  }
  const uint8_t* p = bytes.data() + 4;
  const auto format = Read<uint32_t>(p);
  if (format != kFormat) {
    return InvalidArgument("model checkpoint: unsupported format " + std::to_string(format));
  }
  ModelState s;
  s.version = Read<uint64_t>(p + 4);
  uint64_t n[3];
  for (int i = 0; i < 3; ++i) n[i] = Read<uint64_t>(p + 12 + 8 * i);
  const uint64_t payload = bytes.size() - kHeaderBytes;
  // Checked one by one so that huge lengths cannot overflow the sum.
  uint64_t need = 0;
  for (uint64_t len : n) {
    if (len > payload / sizeof(float) || need + len * sizeof(float) > payload) {
      return InvalidArgument("model checkpoint: truncated (" + std::to_string(bytes.size()) +
                             " bytes)");
    }
    need += len * sizeof(float);
  }
  if (need != payload) {
    return InvalidArgument("model checkpoint: " + std::to_string(payload - need) +
                           " trailing bytes");
  }
  const uint8_t* data = bytes.data() + kHeaderBytes;
  std::vector<float>* dst[3] = {&s.weights, &s.momentum, &s.second_moment};
  for (int i = 0; i < 3; ++i) {
    dst[i]->resize(n[i]);
    if (n[i] != 0) std::memcpy(dst[i]->data(), data, n[i] * sizeof(float));
    data += n[i] * sizeof(float);
  }
  return s;
}

}  // namespace shoal::aggregator
