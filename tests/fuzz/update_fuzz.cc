// libFuzzer target for the update body parser (shoal/fl/wire/update_format.h).
// Every input must either parse, with every tensor view inside the input, or be refused with
// kInvalidArgument; anything else (a crash, a sanitizer report, another code) is a bug.
// Build: clang++ -std=c++20 -fsanitize=fuzzer,address,undefined update_fuzz.cc -lshoal_model ...
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::model;
  static const ModelSpec kSpec = MlpSpec(3, {4}, 2);
  const std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data), size);
  const shoal::Result<UpdateView> r = ParseUpdate(body, kSpec);
  if (!r.ok()) {
    if (r.status().code() != shoal::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  unsigned sum = 0;
  for (const TensorView& t : r->tensors) {
    if (t.data < body.data() || t.data + t.length > body.data() + body.size()) std::abort();
    for (uint64_t i = 0; i < t.length; ++i) sum += static_cast<unsigned>(t.data[i]);
  }
  return static_cast<int>(sum & 0);
}
