// What the instance manager tells an observer of its instances (the compromise detector,
// shoal/security/detect/behaviour_monitor.h): an instance became ready (with the cgroup it runs in)
// or is gone, and, for `shoal describe`, what the observer knows of a function. Called on the
// manager's loop thread with the manager's lock held (Describe: on the reader's thread): an
// observer must not call back into the manager from these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shoal/interfaces/function_spec.h"
#include "shoal/interfaces/runtime_view.h"
#include "shoal/runtime/node/function_runtime.h"

namespace shoal {

struct ObservedInstance {
  const FunctionSpec* spec = nullptr;
  std::shared_ptr<FunctionRuntime> runtime;  // its router counts the requests it serves
  uint32_t key = 0;
  int pid = 0;
  std::string cgroup_version;            // "v1" or "v2"
  std::vector<std::string> cgroup_dirs;  // the instance's cgroup, one directory per hierarchy
};

class InstanceObserver {
 public:
  virtual ~InstanceObserver() = default;
  virtual void InstanceReady(const ObservedInstance& inst) = 0;
  virtual void InstanceGone(uint32_t key) = 0;
  virtual void Describe(const std::string& function, FunctionStats* stats) = 0;
};

}  // namespace shoal
