// bench-fold --formats: the fused dequantize-and-fold of block-quantized updates (int8, int4)
// against the memory-bandwidth bound measured in the same run (STREAM, stream_bandwidth.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace shoal::bench {

// Prints the table and its RESULT line; 0, or 2 for an unknown format name.
int FoldFormatsTable(const std::vector<std::string>& formats, size_t n, size_t k, int reps,
                     unsigned threads);

}  // namespace shoal::bench
