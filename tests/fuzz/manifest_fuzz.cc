// Fuzz target for Function manifests (shoal/control/node/manifest.h), which
// arrive from any client of POST /v1/functions. Every input must either parse into specs that
// satisfy the documented limits, or be refused with kInvalidArgument and a message; an
// exception, a crash or a sanitizer report is a bug. The small value parsers (durations,
// quantities, cpu) get the same input.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "shoal/common/config.h"
#include "shoal/control/node/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  static const NodeConfig kDefaults;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const Result<std::vector<FunctionSpec>> r = ParseFunctionManifests(text, kDefaults);
  if (!r.ok()) {
    if (r.status().code() != StatusCode::kInvalidArgument || r.status().message().empty()) {
      std::abort();
    }
  } else {
    std::set<std::string> names;
    for (const FunctionSpec& s : *r) {
      if (!IsDnsLabel(s.name) || !names.insert(s.name).second) std::abort();
      if (s.handler.builtin.empty() == s.handler.library.empty()) std::abort();
      if (s.concurrency < 1 || s.concurrency > kMaxConcurrency) std::abort();
      if (s.max_scale < 1 || s.max_scale > kMaxScale || s.min_scale > s.max_scale) std::abort();
      // Durations are capped so the runtime's integer ms/ns conversions cannot overflow.
      if (!(s.timeout_s > 0) || !(s.keep_alive_s >= 0)) std::abort();
      if (s.timeout_s > kMaxDurationSeconds || s.keep_alive_s > kMaxDurationSeconds) std::abort();
      if (s.max_body_bytes == 0 || s.manifest.empty()) std::abort();
      if (s.id != 0 || s.generation != 0) std::abort();
    }
  }

  // The value parsers accept negative durations (callers check the sign) but never NaN, and
  // never a negative quantity or cpu.
  double seconds = 0;
  if (ParseDuration(text, &seconds) && std::isnan(seconds)) std::abort();
  uint64_t bytes = 0;
  (void)ParseQuantity(text, &bytes);
  double cores = 0;
  if (ParseCpu(text, &cores) && !(cores >= 0)) std::abort();
  return 0;
}
