// How a dataset is split among simulated FL clients: iid, Dirichlet(alpha) label skew (the
// standard non-IID split), or k classes per client. Spec strings as on the command line
// ("iid", "dirichlet:0.5", "classes:2"); every split is deterministic from its seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::client {

struct PartitionSpec {
  enum class Kind { kIid, kDirichlet, kClasses };
  Kind kind = Kind::kIid;
  double alpha = 0.5;          // kDirichlet: concentration; small = more skewed
  int classes_per_client = 2;  // kClasses
};

// "iid" | "dirichlet:<alpha > 0>" | "classes:<k >= 1>". Errors name the bad part.
Result<PartitionSpec> ParsePartitionSpec(std::string_view spec);
std::string ToString(const PartitionSpec& spec);

struct PartitionOptions {
  // Dirichlet draws are repeated until every client has at least this many samples (then the
  // largest clients give samples to the rest, if that never happens).
  size_t min_samples_per_client = 10;
};

// One list of sample indices per client; for iid and dirichlet, every sample is assigned
// exactly once. For classes:k every class is covered when num_clients * k >= num_classes, and
// each class's samples are shared evenly among the clients that hold it.
Result<std::vector<std::vector<uint32_t>>> Partition(std::span<const uint8_t> labels,
                                                     int num_classes, int num_clients,
                                                     const PartitionSpec& spec, uint64_t seed,
                                                     const PartitionOptions& options = {});

// Shannon entropy (nats) of the label distribution of `indices`: log(num_classes) when
// balanced, 0 when one class. A measure of how non-IID a client's share is.
double LabelEntropy(std::span<const uint8_t> labels, std::span<const uint32_t> indices,
                    int num_classes);

// Per-class sample counts of `indices`.
std::vector<size_t> ClassCounts(std::span<const uint8_t> labels, std::span<const uint32_t> indices,
                                int num_classes);

}  // namespace shoal::client
