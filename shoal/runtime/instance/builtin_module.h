// Built-in handlers with heavy dependencies live in modules of their own, loaded only by the
// instances that run them: lib/shoal/modules/libshoal-builtin-<name>.so beside the binaries
// (`inference`: oneDNN, ONNX's protobuf, libcurl; `fl-leaf`: protobuf, the fold, the CUDA
// fold). Every other instance starts without mapping those libraries or running their
// initialisers (a spawn of shoal-fn costs about what the dynamic loader's work costs).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "shoal/common/status.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {

// The directory the modules are loaded from: <directory of this executable>/../lib/shoal/modules.
std::string BuiltinModuleDir();

// dlopens the module of built-in handler `name` from BuiltinModuleDir() and asks it for a
// handler. Unavailable, naming the file and dlerror(), when the module is missing or broken.
Result<std::unique_ptr<Handler>> LoadBuiltinModule(std::string_view name);

// The one symbol a module exports: fills *out, or *status with why it could not.
using BuiltinModuleEntry = void (*)(Status* status, std::unique_ptr<Handler>* out);
inline constexpr const char* kBuiltinModuleEntry = "shoal_builtin_create";

}  // namespace shoal

// Defines a module's entry point from a factory returning Result<std::unique_ptr<Handler>>.
#define SHOAL_BUILTIN_MODULE(factory)                                          \
  extern "C" __attribute__((visibility("default"))) void shoal_builtin_create( \
      ::shoal::Status* status, std::unique_ptr<::shoal::Handler>* out) {       \
    auto handler = factory();                                                  \
    if (handler.ok()) {                                                        \
      *out = std::move(*handler);                                              \
    } else {                                                                   \
      *status = handler.status();                                              \
    }                                                                          \
  }
