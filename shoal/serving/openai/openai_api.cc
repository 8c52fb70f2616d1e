#include "shoal/serving/openai/openai_api.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace shoal::openai {
namespace {

using Json = nlohmann::json;

std::string Dump(const Json& j) {
  // Byte-level generations need not be UTF-8: invalid bytes become U+FFFD.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Status Field(const std::string& name, const std::string& want) {
  return InvalidArgument(name + ": " + want);
}

std::string NumText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// A number field within [lo, hi], or its default when absent or null.
Result<double> Number(const Json& body, const char* name, double fallback, double lo, double hi) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Field(name, "must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Field(name, "must be in [" + NumText(lo) + ", " + NumText(hi) + "], got " + it->dump());
  }
  return v;
}

Result<std::string> TextContent(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) return Field(where, "must be a string or a list of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    // (json::value with a default throws when the field has another type: checked first.)
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return Field(where + "[" + std::to_string(i) + "]",
                   "only {\"type\": \"text\", \"text\": ...} parts are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

Result<std::string> PromptOf(const Json& body) {
  auto it = body.find("prompt");
  if (it == body.end()) return Field("prompt", "is required");
  const Json& p = *it;
  if (p.is_string()) return p.get<std::string>();
  // Token ids (bytes here), or a list of one prompt (either form).
  auto tokens = [](const Json& list) -> Result<std::string> {
    std::string bytes;
    for (const Json& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > 256) {
        return Field("prompt", "token ids are integers in [0, 256], got " + t.dump());
      }
      const int64_t id = t.get<int64_t>();
      if (id == 256) return Field("prompt", "token 256 (<|endoftext|>) cannot be in a prompt");
      bytes.push_back(static_cast<char>(id));
    }
    return bytes;
  };
  if (p.is_array() && !p.empty() && p[0].is_number()) return tokens(p);
  if (p.is_array() && p.size() == 1) {
    if (p[0].is_string()) return p[0].get<std::string>();
    if (p[0].is_array()) return tokens(p[0]);
  }
  if (p.is_array() && p.size() > 1) {
    return Field("prompt", "one prompt per request (got a list of " + std::to_string(p.size()) +
                               "); send them as separate requests");
  }
  return Field("prompt", "must be a string, a list of token ids, or a list of one of those");
}

}  // namespace

std::string ChatPrompt(std::string_view messages_json) {
  const Json messages = Json::parse(messages_json, nullptr, false);
  std::string prompt;
  for (const Json& m : messages) {
    auto text = TextContent(m.value("content", Json()), "messages");
    prompt += m.value("role", "user") + ": " + (text.ok() ? *text : std::string()) + "\n";
  }
  return prompt + "assistant: ";
}

Result<ParsedRequest> ParseRequest(Endpoint endpoint, std::string_view body_text,
                                   const std::string& served, uint64_t default_seed) {
  const Json body = Json::parse(body_text, nullptr, false);
  if (body.is_discarded()) return InvalidArgument("the request body is not JSON");
  if (!body.is_object()) return InvalidArgument("the request body must be a JSON object");
  ParsedRequest r;
  lm::GenerationRequest& g = r.generation;
  // model: "<served>" or "<served>:<adapter>".
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return Field("model", "must be a string");
    r.model = it->get<std::string>();
    const size_t colon = r.model.find(':');
    const std::string name = r.model.substr(0, colon);
    if (name != served) {
      return Field("model", "'" + r.model + "' is not served here: use '" + served + "' or '" +
                                served + ":<adapter>'");
    }
    if (colon != std::string::npos) g.adapter = r.model.substr(colon + 1);
  } else {
    r.model = served;
  }
  if (auto it = body.find("adapter"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return Field("adapter", "must be a string");
    g.adapter = it->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    auto prompt = PromptOf(body);
    if (!prompt.ok()) return prompt.status();
    g.prompt = std::move(*prompt);
  } else {
    auto it = body.find("messages");
    if (it == body.end()) return Field("messages", "is required");
    if (!it->is_array() || it->empty()) return Field("messages", "must be a non-empty list");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& m = (*it)[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return Field(at + ".role", "is required (system, user or assistant)");
      }
      auto text = TextContent(m.value("content", Json()), at + ".content");
      if (!text.ok()) return text.status();
    }
    g.prompt = ChatPrompt(it->dump());
  }
  const char* max_name =
      body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  auto max_tokens = Number(body, max_name, 16, 1, 1 << 20);
  if (!max_tokens.ok()) return max_tokens.status();
  if (*max_tokens != static_cast<int>(*max_tokens)) return Field(max_name, "must be an integer");
  g.max_tokens = static_cast<int>(*max_tokens);
  auto temperature = Number(body, "temperature", 1, 0, 2);
  if (!temperature.ok()) return temperature.status();
  g.sampling.temperature = static_cast<float>(*temperature);
  auto top_p = Number(body, "top_p", 1, 0, 1);
  if (!top_p.ok()) return top_p.status();
  if (*top_p == 0) return Field("top_p", "must be in (0, 1], got 0");
  g.sampling.top_p = static_cast<float>(*top_p);
  g.sampling.seed = default_seed;
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Field("seed", "must be an integer");
    g.sampling.seed = static_cast<uint64_t>(it->get<int64_t>());
  }
  if (auto it = body.find("n"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1) {
      return Field("n", "only 1 choice per request is supported");
    }
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    const Json stops = it->is_string() ? Json::array({*it}) : *it;
    if (!stops.is_array() || stops.size() > 4) {
      return Field("stop", "must be a string or a list of at most 4 strings");
    }
    for (const Json& s : stops) {
      if (!s.is_string() || s.get<std::string>().empty()) {
        return Field("stop", "each stop sequence must be a non-empty string");
      }
      g.stop.push_back(s.get<std::string>());
    }
  }
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return Field("stream", "must be true or false");
    r.stream = it->get<bool>();
  }
  if (auto it = body.find("return_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return Field("return_token_ids", "must be true or false");
    r.return_token_ids = it->get<bool>();
  }
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return Field("stream_options", "must be an object");
    if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) return Field("stream_options.include_usage", "must be true or false");
      r.include_usage = u->get<bool>();
    }
  }
  for (const char* unsupported : {"logprobs", "top_logprobs", "tools", "suffix", "best_of"}) {
    auto it = body.find(unsupported);
    if (it != body.end() && !it->is_null() && *it != false) {
      return Field(unsupported, "is not supported by this server");
    }
  }
  return r;
}

namespace {

Json Envelope(const AnswerInfo& info, bool chunk) {
  const bool chat = info.endpoint == Endpoint::kChat;
  return {
      {"id", info.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", info.created},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint}};
}

Json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json FinishJson(std::string_view finish) {
  return finish.empty() ? Json(nullptr) : Json(std::string(finish));
}

}  // namespace

std::string AnswerJson(const AnswerInfo& info, std::string_view text, std::string_view finish,
                       const Usage& usage, const std::vector<int>* token_ids) {
  Json j = Envelope(info, false);
  Json choice = {{"index", 0}, {"finish_reason", FinishJson(finish)}, {"logprobs", nullptr}};
  if (info.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
  }
  if (token_ids != nullptr) choice["token_ids"] = *token_ids;
  j["choices"] = Json::array({choice});
  j["usage"] = UsageJson(usage);
  return Dump(j) + "\n";
}

std::string ChunkEvent(const AnswerInfo& info, std::string_view text, std::string_view finish,
                       bool first) {
  Json j = Envelope(info, true);
  Json choice = {{"index", 0}, {"finish_reason", FinishJson(finish)}, {"logprobs", nullptr}};
  if (info.endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish.empty())) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  j["choices"] = Json::array({choice});
  return "data: " + Dump(j) + "\n\n";
}

std::string UsageEvent(const AnswerInfo& info, const Usage& usage) {
  Json j = Envelope(info, true);
  j["choices"] = Json::array();
  j["usage"] = UsageJson(usage);
  return "data: " + Dump(j) + "\n\n";
}

std::string ErrorJson(std::string_view message, std::string_view type) {
  Json j = {{"error",
             {{"message", std::string(message)},
              {"type", std::string(type)},
              {"param", nullptr},
              {"code", nullptr}}}};
  return Dump(j) + "\n";
}

}  // namespace shoal::openai
