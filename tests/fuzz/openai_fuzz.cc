// Fuzz target for the lm function's OpenAI request parser (shoal/serving/openai/openai_api.cc):
// every completions and chat body comes from a client. Whatever the bytes, parsing either fails
// with kInvalidArgument naming a field (or the body), or yields a request the engine's own checks
// take as they are documented: a sampling range, max_tokens >= 1, non-empty stop sequences; the
// answer writers then produce JSON for any text (invalid UTF-8 becomes U+FFFD, never an
// exception).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shoal/serving/openai/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  // The first byte chooses the route.
  const auto endpoint =
      size > 0 && (data[0] & 1) ? openai::Endpoint::kChat : openai::Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data) + (size > 0), size - (size > 0));
  auto r = openai::ParseRequest(endpoint, body, "lm", 7);
  if (!r.ok()) {
    if (r.status().code() != StatusCode::kInvalidArgument || r.status().message().empty()) {
      std::abort();
    }
    return 0;
  }
  const lm::GenerationRequest& g = r->generation;
  if (g.max_tokens < 1 || !(g.sampling.temperature >= 0 && g.sampling.temperature <= 2) ||
      !(g.sampling.top_p > 0 && g.sampling.top_p <= 1) || g.stop.size() > 4) {
    std::abort();
  }
  for (const std::string& s : g.stop) {
    if (s.empty()) std::abort();
  }
  openai::AnswerInfo info;
  info.endpoint = endpoint;
  info.model = r->model;
  // The prompt's bytes as generated text: any bytes, valid UTF-8 or not.
  const std::string json = openai::AnswerJson(info, g.prompt, "stop", {1, 2});
  const std::string event = openai::ChunkEvent(info, g.prompt, "", true);
  if (json.empty() || event.rfind("data: {", 0) != 0) std::abort();
  return 0;
}
