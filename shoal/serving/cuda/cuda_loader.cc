// CreateCudaExecutor, PinHostMemory and UnpinHostMemory as the rest of Shoal sees them: they
// load libshoal_inference_cuda.so (cuda_module_api.h says why it is a module) on first use and
// keep it loaded. Where it is looked for, in order: $SHOAL_CUDA_MODULE, the build tree's copy,
// ../lib/ beside the running executable, then the dynamic linker's search path.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#include "shoal/serving/cuda/cuda_executor.h"
#include "shoal/serving/cuda/cuda_module_api.h"

namespace shoal::inference {
namespace {

constexpr char kModuleName[] = "libshoal_inference_cuda.so";

struct Loaded {
  const CudaModuleApi* api = nullptr;
  std::string error;  // why api is null
};

Loaded Load() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SHOAL_CUDA_MODULE"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  }
#ifdef SHOAL_CUDA_MODULE_BUILD_PATH
  candidates.emplace_back(SHOAL_CUDA_MODULE_BUILD_PATH);
#endif
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    std::string dir(exe, static_cast<size_t>(len));
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/../lib/" + kModuleName);
    candidates.push_back(dir + "/" + kModuleName);
  }
  candidates.emplace_back(kModuleName);
  Loaded out;
  for (const std::string& path : candidates) {
    if (path.find('/') != std::string::npos && access(path.c_str(), R_OK) != 0) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      out.error = std::string("cannot load the CUDA executor (") + dlerror() + ")";
      continue;
    }
    auto entry =
        reinterpret_cast<const CudaModuleApi* (*)()>(dlsym(handle, "shoal_cuda_module_api"));
    const CudaModuleApi* api = entry != nullptr ? entry() : nullptr;
    if (api == nullptr || api->version != kCudaModuleApiVersion) {
      out.error = path + " is not this build's CUDA executor module";
      continue;  // stays loaded: unloading CUDA libraries is not worth the risk
    }
    out.api = api;
    return out;
  }
  if (out.error.empty()) out.error = std::string("cannot find ") + kModuleName;
  return out;
}

const Loaded& Module() {
  static const Loaded loaded = Load();  // thread-safe, once
  return loaded;
}

}  // namespace

Result<std::unique_ptr<Executor>> CreateCudaExecutor() {
  const Loaded& m = Module();
  if (m.api == nullptr) return Unavailable(m.error);
  return m.api->create();
}

Status PinHostMemory(void* base, size_t bytes) {
  const Loaded& m = Module();
  if (m.api == nullptr) return Unavailable(m.error);
  return m.api->pin(base, bytes);
}

Status UnpinHostMemory(void* base) {
  const Loaded& m = Module();
  if (m.api == nullptr) return Unavailable(m.error);
  return m.api->unpin(base);
}

}  // namespace shoal::inference
