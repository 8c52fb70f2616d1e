// The function registry: the deployed FunctionSpecs of this node (or cluster), each persisted
// as a protobuf FunctionRecord under <state_dir>/functions/ so deployments survive a restart.
// Thread-safe: the control API writes it, the instance manager reads it from its own thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/interfaces/function_spec.h"

namespace shoal {

// Function ids index the data plane's per-function counters: 1 .. kMaxFunctionId.
inline constexpr uint32_t kMaxFunctionId = 4095;

class FunctionRegistry {
 public:
  // Loads every persisted deployment under <config.state_dir>/functions/ (created if missing).
  static Result<std::unique_ptr<FunctionRegistry>> Open(const NodeConfig& config);

  // Validates every document of `manifests` before persisting any (all or nothing). A new name
  // gets the lowest free id and generation 1; an existing name keeps its id and created time
  // and gets generation + 1. Returns the stored specs in document order.
  Result<std::vector<FunctionSpec>> Deploy(std::string_view manifests);
  // The same for specs already validated by ParseManifests (a file mixing kinds).
  Result<std::vector<FunctionSpec>> Deploy(std::vector<FunctionSpec> specs);
  Status Delete(const std::string& name);
  std::optional<FunctionSpec> Get(const std::string& name) const;
  std::vector<FunctionSpec> List() const;  // sorted by name

  const NodeConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }

 private:
  FunctionRegistry(NodeConfig config, std::string dir);
  Status Load();
  uint32_t LowestFreeId(const std::vector<bool>& taken) const;

  const NodeConfig config_;
  const std::string dir_;
  mutable std::mutex mu_;
  std::map<std::string, FunctionSpec> functions_;  // by name
};

}  // namespace shoal
