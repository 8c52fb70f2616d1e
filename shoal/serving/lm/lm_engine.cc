#include "shoal/serving/lm/lm_engine.h"

#include <algorithm>

namespace shoal::lm {
namespace {

// How many bytes at the end of `s` are an incomplete UTF-8 character (held back until it is).
size_t IncompleteUtf8Tail(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = (c & 0xE0) == 0xC0   ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// The longest end of `text` that is a proper start of one of `stops`.
size_t StopPrefixTail(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& stop : stops) {
    for (size_t n = std::min(stop.size() - 1, text.size()); n > best; --n) {
      if (text.substr(text.size() - n) == std::string_view(stop).substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace

const char* FinishReasonName(FinishReason r) {
  return r == FinishReason::kLength ? "length" : r == FinishReason::kStop ? "stop" : "";
}

struct LmEngine::Sequence {
  Sequence(const LmConfig& c, GenerationRequest r, GenerationSink k)
      : request(std::move(r)), sink(std::move(k)), cache(c), sampler(request.sampling) {}
  GenerationRequest request;
  GenerationSink sink;
  KvCache cache;
  Sampler sampler;
  std::shared_ptr<const LoraAdapter> adapter;
  std::vector<int> pending;  // fed in the next step
  std::vector<float> logits;
  std::string text;    // generated so far (after a stop sequence: cut before it)
  size_t emitted = 0;  // bytes of `text` given to the sink
  int completion = 0;
  bool done = false;
  int prompt_tokens = 0;  // an empty prompt is one (the document separator)
  int budget = 0;         // decode budget: min(max_tokens, n_ctx - prompt_tokens)
  uint64_t charge = 0;    // its share of tokens_in_flight_
};

LmEngine::LmEngine(std::shared_ptr<const LmWeights> base, EngineOptions options)
    : base_(options.int8 ? QuantizeInt8(*base) : std::move(base)),
      options_(options),
      forward_(base_, options.threads) {}

LmEngine::~LmEngine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LmEngine::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LmEngine::Run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !waiting_.empty() || !active_.empty(); });
      if (stopping_) return;
    }
    StepOnce();
  }
}

Status LmEngine::Submit(GenerationRequest request, GenerationSink sink) {
  const LmConfig& c = base_->config;
  if (request.prompt.size() + 1 > static_cast<size_t>(c.n_ctx)) {
    return InvalidArgument("prompt: " + std::to_string(request.prompt.size()) +
                           " tokens (bytes), the model's context is " + std::to_string(c.n_ctx) +
                           " tokens and generation needs one more");
  }
  if (request.max_tokens < 1) {
    return InvalidArgument("max_tokens: must be at least 1, got " +
                           std::to_string(request.max_tokens));
  }
  if (!(request.sampling.temperature >= 0 && request.sampling.temperature <= 2)) {
    return InvalidArgument("temperature: must be in [0, 2]");
  }
  if (!(request.sampling.top_p > 0 && request.sampling.top_p <= 1)) {
    return InvalidArgument("top_p: must be in (0, 1]");
  }
  for (const std::string& s : request.stop) {
    if (s.empty()) return InvalidArgument("stop: an empty stop sequence");
  }
  auto seq = std::make_unique<Sequence>(c, std::move(request), std::move(sink));
  seq->prompt_tokens = std::max<int>(1, static_cast<int>(seq->request.prompt.size()));
  seq->budget = std::min(seq->request.max_tokens, c.n_ctx - seq->prompt_tokens);
  seq->charge = static_cast<uint64_t>(seq->prompt_tokens + seq->budget);
  {
    std::lock_guard lock(mu_);
    if (!seq->request.adapter.empty()) {
      auto it = adapters_.find(seq->request.adapter);
      if (it == adapters_.end()) {
        std::string names;
        for (const auto& [name, a] : adapters_) names += (names.empty() ? "" : ", ") + name;
        return NotFound("adapter '" + seq->request.adapter + "' is not loaded (loaded: " +
                        (names.empty() ? std::string("none") : names) + ")");
      }
    }
    tokens_in_flight_ += seq->charge;
    waiting_.push_back(std::move(seq));
  }
  cv_.notify_one();
  ReportLoad();
  return {};
}

void LmEngine::PutAdapter(std::shared_ptr<const LoraAdapter> adapter) {
  std::lock_guard lock(mu_);
  adapters_[adapter->name] = std::move(adapter);
  ++stats_.adapter_puts;
}

bool LmEngine::HasAdapter(const std::string& name) const {
  std::lock_guard lock(mu_);
  return adapters_.count(name) != 0;
}

std::vector<std::pair<std::string, uint64_t>> LmEngine::Adapters() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, a] : adapters_) out.emplace_back(name, a->version);
  return out;
}

EngineStats LmEngine::stats() const {
  std::lock_guard lock(mu_);
  EngineStats s = stats_;
  s.waiting = static_cast<int>(waiting_.size());
  s.load = LoadLocked();
  return s;
}

EngineLoad LmEngine::LoadLocked() const {
  EngineLoad l;
  l.tokens_in_flight = tokens_in_flight_;
  l.running = static_cast<uint32_t>(stats_.active);
  l.queued = static_cast<uint32_t>(waiting_.size());
  return l;
}

void LmEngine::ReportLoad() {
  if (!load_sink_) return;
  std::lock_guard report(report_mu_);
  EngineLoad l;
  {
    std::lock_guard lock(mu_);
    l = LoadLocked();
  }
  load_sink_(l);
}

bool LmEngine::StepOnce() {
  const LmConfig& c = base_->config;
  {
    std::lock_guard lock(mu_);
    while (!waiting_.empty() && active_.size() < static_cast<size_t>(options_.max_sequences)) {
      std::unique_ptr<Sequence> s = std::move(waiting_.front());
      waiting_.pop_front();
      if (!s->request.adapter.empty()) {
        // Unloaded since it was submitted: the newest of that name is gone, so is the request's.
        auto it = adapters_.find(s->request.adapter);
        if (it != adapters_.end()) s->adapter = it->second;
      }
      const std::string& p = s->request.prompt;
      // An empty prompt starts from the document separator, as a document does.
      if (p.empty()) s->pending.push_back(c.eos);
      for (char ch : p) s->pending.push_back(static_cast<unsigned char>(ch));
      stats_.prompt_tokens += s->pending.size();
      s->logits.resize(static_cast<size_t>(c.vocab_size));
      active_.push_back(std::move(s));
    }
    stats_.active = static_cast<int>(active_.size());
    stats_.max_active = std::max(stats_.max_active, stats_.active);
  }
  if (active_.empty()) return false;
  inputs_.clear();
  for (const auto& s : active_) {
    inputs_.push_back({&s->cache, s->pending, s->adapter.get(), s->logits.data()});
  }
  forward_.Step(inputs_);
  for (const auto& s : active_) Emit(*s, s->sampler.Next(s->logits));
  // Prompts are prefilled in their first step; what is left is the decode budget not yet used
  // (none once the sequence is done).
  uint64_t released = 0;
  for (const auto& s : active_) {
    const uint64_t left = s->done ? 0 : static_cast<uint64_t>(s->budget - s->completion);
    released += s->charge - left;
    s->charge = left;
  }
  uint64_t finished = 0;
  std::erase_if(active_, [&](const std::unique_ptr<Sequence>& s) {
    finished += s->done;
    return s->done;
  });
  {
    std::lock_guard lock(mu_);
    ++stats_.steps;
    stats_.sequences += finished;
    stats_.completion_tokens += inputs_.size();
    stats_.active = static_cast<int>(active_.size());
    tokens_in_flight_ -= released;
  }
  ReportLoad();
  return true;
}

void LmEngine::Emit(Sequence& s, int token) {
  const LmConfig& c = base_->config;
  ++s.completion;
  FinishReason finish = FinishReason::kNone;
  if (token == c.eos) {
    finish = FinishReason::kStop;
  } else {
    s.text.push_back(static_cast<char>(token));
    for (const std::string& stop : s.request.stop) {
      if (std::string_view(s.text).ends_with(stop)) {
        s.text.resize(s.text.size() - stop.size());
        finish = FinishReason::kStop;
        break;
      }
    }
    if (finish == FinishReason::kNone &&
        (s.completion >= s.request.max_tokens || s.cache.length + 1 >= c.n_ctx)) {
      finish = FinishReason::kLength;
    }
  }
  s.pending.assign(1, token);
  size_t show = s.text.size();
  if (finish == FinishReason::kNone) {
    const std::string_view rest = std::string_view(s.text).substr(s.emitted);
    show -= std::max(StopPrefixTail(rest, s.request.stop), IncompleteUtf8Tail(rest));
  }
  GenerationEvent e;
  e.token = token;
  e.text = std::string_view(s.text).substr(s.emitted, show - s.emitted);
  e.done = finish != FinishReason::kNone;
  e.finish = finish;
  e.prompt_tokens = static_cast<int>(s.request.prompt.size());
  e.completion_tokens = s.completion;
  e.adapter_version = s.adapter ? s.adapter->version : 0;
  s.emitted = show;
  s.done = e.done;
  s.sink(e);
}

}  // namespace shoal::lm
