// NumPy's .npy format (version 1.0), as Flower's Array carries a numpy.ndarray ("numpy.ndarray"
// stype: the bytes np.save writes): float32 little-endian, C order, only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::flower {

// np.save's bytes for a float32 array of `shape`.
std::string EncodeNpyF32(std::span<const uint64_t> shape, std::span<const float> values);

struct NpyView {
  std::vector<uint64_t> shape;
  std::string_view data;  // the raw little-endian float32 values
};
// Only '<f4' in C order; anything else is kInvalidArgument naming what was found.
Result<NpyView> ParseNpyF32(std::string_view bytes);

// Flower's Array JSON shape ("[6, 1, 5, 5]") and numpy's dict shape ("(6, 1, 5, 5)", "(10,)").
std::string JsonShape(std::span<const uint64_t> shape);

}  // namespace shoal::flower
