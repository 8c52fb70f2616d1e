// The OpenAI-compatible text API of the lm inference function: POST /v1/completions and
// /v1/chat/completions bodies parsed into a generation request (every error names its field),
// and the answers written as OpenAI writes them: one JSON document, or Server-Sent Events
// (`data: {...}\n\n` per piece, then `data: [DONE]\n\n`) for `stream: true`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/serving/lm/lm_engine.h"

namespace shoal::openai {

enum class Endpoint { kCompletions, kChat };

struct ParsedRequest {
  lm::GenerationRequest generation;
  std::string model;  // as the request named it (echoed in the answer)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // return_token_ids (as vLLM's): the answer's choice carries the generated token ids too.
  bool return_token_ids = false;
};

// `served` is the function's model name: `model` is "<served>" (the base) or
// "<served>:<adapter>"; a request's `adapter` field names the adapter instead. Without a seed
// the request samples from `default_seed`.
Result<ParsedRequest> ParseRequest(Endpoint endpoint, std::string_view body,
                                   const std::string& served, uint64_t default_seed);

// The chat template of the byte-level model (it has no special tokens but <|endoftext|>): each
// message as "<role>: <content>\n", then "assistant: ".
std::string ChatPrompt(std::string_view messages_json);

struct AnswerInfo {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::string fingerprint;  // the adapter version ("base", "<adapter>@v<version>")
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// The whole answer (stream: false).
std::string AnswerJson(const AnswerInfo& info, std::string_view text, std::string_view finish,
                       const Usage& usage, const std::vector<int>* token_ids = nullptr);
// One event of a stream: a piece of text (chat: the first event also carries the role), or the
// last one with its finish reason (text may be empty then).
std::string ChunkEvent(const AnswerInfo& info, std::string_view text, std::string_view finish,
                       bool first);
// stream_options.include_usage: the event with no choices and the usage, before [DONE].
std::string UsageEvent(const AnswerInfo& info, const Usage& usage);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// {"error": {"message", "type", "param", "code"}} as OpenAI answers errors.
std::string ErrorJson(std::string_view message, std::string_view type);

}  // namespace shoal::openai
