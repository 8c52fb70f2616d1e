// This node as placement sees it: its capacity (cores, memory, visible NVIDIA GPUs) and what a
// function's manifest asks of it. shoald's instance manager places every instance start through
// Place() over a one-node ClusterModel built from these.
#pragma once

#include <string>

#include "shoal/control/placement/placement.h"
#include "shoal/interfaces/function_spec.h"

namespace shoal {

// Cores: `cores_override` when > 0 (node config), else std::thread::hardware_concurrency().
// Memory: MemTotal from `meminfo_path`. GPUs: the /dev/nvidia<N> device files under `dev_dir`
// (no CUDA is linked or initialised).
Resources ProbeNodeCapacity(double cores_override = 0,
                            const std::string& meminfo_path = "/proc/meminfo",
                            const std::string& dev_dir = "/dev");

// The manifest's resources block in placement's units (a request of 0 counts as 0).
Resources SpecResources(const FunctionSpec& spec);

// Why `request` does not fit on `node`, naming the first resource that is short ("" if it fits).
std::string ShortResource(const NodeState& node, const Resources& request);

}  // namespace shoal
