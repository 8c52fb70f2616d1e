// The lm inference handler. Routes under the function's path (/fn/<name>):
//   POST /v1/completions, POST /v1/chat/completions   OpenAI-compatible; stream: true as SSE
//   GET  /v1/models                                    the base and "<base>:<adapter>" names
//   GET  /stats                                        the engine's counters and adapter versions
// Each request runs on one of the instance's worker threads: it submits to the engine and waits
// for its sequence's pieces (the scheduler thread never waits on it); a streamed answer sends
// each piece to the gateway as it comes (ResponseBuilder::SendPiece).
//
// Settings (shoal/control/node/manifest.cc writes them from spec.inference): SHOAL_INFER_LM_BASE
// (the base model's safetensors), SHOAL_INFER_LM_ADAPTERS (JSON: [{name, path | flJob, alpha}]),
// SHOAL_INFER_MODEL, SHOAL_INFER_MAX_BATCH (sequences stepped together), SHOAL_INFER_THREADS,
// SHOAL_INFER_POLL_MS; SHOAL_GATEWAY for adapters that follow an FL job.
#include "shoal/serving/handler/lm_handler.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/env.h"
#include "shoal/common/file_io.h"
#include "shoal/common/log.h"
#include "shoal/serving/handler/commit_watch.h"
#include "shoal/serving/handler/model_feed.h"
#include "shoal/serving/lm/lm_engine.h"
#include "shoal/serving/openai/openai_api.h"

namespace shoal {
namespace {

using Json = nlohmann::json;

// An adapter that follows an FL job: each committed version replaces it in the engine.
struct FollowedAdapter {
  std::string name;
  std::string job;
  std::optional<float> alpha;  // the manifest's; else the version's metadata, else the job's
  std::unique_ptr<ModelFeed> feed;
  uint64_t version = 0;
  bool loaded = false;  // version 0 (the job's initial adapter) is one too
};

// The job status document's LoRA alpha, wherever its spec keeps it ("lora": {"alpha": a}).
std::optional<float> FindLoraAlpha(const Json& j) {
  if (j.is_object()) {
    if (auto it = j.find("lora");
        it != j.end() && it->is_object() && it->contains("alpha") && (*it)["alpha"].is_number()) {
      return (*it)["alpha"].get<float>();
    }
    for (const auto& [k, v] : j.items()) {
      if (auto a = FindLoraAlpha(v)) return a;
    }
  } else if (j.is_array()) {
    for (const Json& v : j) {
      if (auto a = FindLoraAlpha(v)) return a;
    }
  }
  return std::nullopt;
}

// What a request's sequence has produced so far: filled on the scheduler thread, drained on
// the request's worker thread.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::string text;  // not yet taken
  std::vector<int> tokens;
  bool done = false;
  std::string finish;
  openai::Usage usage;
  uint64_t adapter_version = 0;
};

class LmHandler final : public Handler {
 public:
  ~LmHandler() override {
    watch_.Stop();
    engine_.reset();
  }

  Status Init() {
    name_ = EnvString("SHOAL_INFER_MODEL", EnvString("SHOAL_FUNCTION").c_str());
    poll_ = std::chrono::milliseconds(EnvUint("SHOAL_INFER_POLL_MS", kDefaultSafetyPollMs));
    auto base = lm::LoadLmWeightsFile(EnvString("SHOAL_INFER_LM_BASE"));
    if (!base.ok()) return base.status();
    base_ = *base;
    lm::EngineOptions options;
    options.max_sequences = static_cast<int>(EnvUint("SHOAL_INFER_MAX_BATCH", 32));
    options.threads = static_cast<int>(EnvUint("SHOAL_INFER_THREADS", 0));
    const std::string precision = EnvString("SHOAL_INFER_PRECISION", "fp32");
    if (precision != "fp32" && precision != "int8") {
      return InvalidArgument("SHOAL_INFER_PRECISION: a language model runs fp32 or int8, got '" +
                             precision + "'");
    }
    options.int8 = precision == "int8";
    engine_ = std::make_unique<lm::LmEngine>(base_, options);
    const Json adapters = Json::parse(EnvString("SHOAL_INFER_LM_ADAPTERS", "[]"), nullptr, false);
    if (!adapters.is_array()) return InvalidArgument("SHOAL_INFER_LM_ADAPTERS is not a JSON list");
    for (const Json& a : adapters) {
      const std::string name = a.value("name", "");
      std::optional<float> alpha;
      if (a.contains("alpha") && a["alpha"].is_number()) alpha = a["alpha"].get<float>();
      if (a.contains("path")) {
        const std::string path = a["path"].get<std::string>();
        auto bytes = ReadFileBytes(path);
        if (!bytes) return InvalidArgument("adapter '" + name + "': cannot read " + path);
        auto ad = lm::LoadLoraAdapter(std::as_bytes(std::span(*bytes)), base_->config, alpha);
        if (!ad.ok()) {
          return InvalidArgument("adapter '" + name + "' (" + path + "): " + ad.status().message());
        }
        auto named = std::make_shared<lm::LoraAdapter>(**ad);
        named->name = name;
        engine_->PutAdapter(std::move(named));
      } else {
        const std::string gateway = EnvString("SHOAL_GATEWAY");
        if (gateway.empty())
          return InvalidArgument("SHOAL_GATEWAY is not set (started by shoald?)");
        auto f = std::make_unique<FollowedAdapter>();
        f->name = name;
        f->job = a.value("flJob", "");
        f->alpha = alpha;
        f->feed = MakeFlModelFeed(gateway, f->job);
        followed_.push_back(std::move(f));
      }
    }
    // The job may have committed nothing yet, or the gateway may still be starting: requests
    // for that adapter are refused (400 naming it) until its first version is in.
    for (auto& f : followed_) (void)Follow(*f);
    const lm::LmConfig& c = base_->config;
    spdlog::info(
        "inference: language model '{}' (shoal-gpt, d_model {}, {} layers, {} heads, context {}, "
        "{}), {} adapters, up to {} sequences per step",
        name_, c.d_model, c.n_layer, c.n_head, c.n_ctx, options.int8 ? "int8" : "fp32",
        engine_->Adapters().size(), options.max_sequences);
    return {};
  }

  Status OnInstanceStart() override {
    engine_->Start();
    if (!followed_.empty()) watch_.Start(poll_, [this] { CheckForNewVersion(); });
    return {};
  }

  bool MayBlock() const override { return true; }
  void OnJobCommitted(uint64_t /*version*/) override { watch_.Notify(); }

  // Reports the engine's load to shoald when it changes: at once when it leaves or reaches
  // zero, else at most every kLoadReportInterval (a step is milliseconds; the autoscaler decides
  // every 200 ms to 2 s). A change held back goes with the next step's report: while anything is in
  // flight the engine steps.
  void SetLoadReportSink(LoadReportSink sink) override {
    engine_->SetLoadSink([this, sink = std::move(sink)](const lm::EngineLoad& l) {
      const LoadReport r{l.tokens_in_flight, l.running, l.queued};
      const auto now = std::chrono::steady_clock::now();
      {
        std::lock_guard lock(report_mu_);
        if (r == last_report_) return;
        const bool edge = (r.tokens_in_flight == 0) != (last_report_.tokens_in_flight == 0);
        if (!edge && now - last_report_at_ < kLoadReportInterval) return;
        last_report_ = r;
        last_report_at_ = now;
      }
      sink(r);
    });
  }

  Status Handle(const Request& request, ResponseBuilder& response) override {
    const bool post = request.method == "POST";
    if (post && request.path == "/v1/completions") {
      return Generate(openai::Endpoint::kCompletions, request, response);
    }
    if (post && request.path == "/v1/chat/completions") {
      return Generate(openai::Endpoint::kChat, request, response);
    }
    if (!post && request.path == "/v1/models") return Reply(response, 200, ModelsJson());
    if (!post && request.path == "/stats") return Reply(response, 200, StatsJson());
    return NotFound("no route " + std::string(request.method) + " " + std::string(request.path) +
                    " (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, /stats)");
  }

 private:
  static Status Reply(ResponseBuilder& response, int status, const std::string& json) {
    response.SetStatus(status);
    auto out = response.Allocate(json.size(), "application/json");
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), json.data(), json.size());
    return {};
  }

  Status Generate(openai::Endpoint endpoint, const Request& request, ResponseBuilder& response) {
    const std::string_view body(reinterpret_cast<const char*>(request.body.data()),
                                request.body.size());
    const uint64_t n = next_id_.fetch_add(1, std::memory_order_relaxed);
    auto parsed = openai::ParseRequest(endpoint, body, name_, n * 0x9E3779B97F4A7C15ull + 1);
    if (!parsed.ok()) {
      return Reply(response, 400,
                   openai::ErrorJson(parsed.status().message(), "invalid_request_error"));
    }
    auto waiter = std::make_shared<Waiter>();
    Status st =
        engine_->Submit(std::move(parsed->generation), [waiter](const lm::GenerationEvent& e) {
          std::lock_guard lock(waiter->mu);
          waiter->text.append(e.text);
          waiter->tokens.push_back(e.token);
          waiter->usage = {e.prompt_tokens, e.completion_tokens};
          waiter->adapter_version = e.adapter_version;
          if (e.done) {
            waiter->done = true;
            waiter->finish = lm::FinishReasonName(e.finish);
          }
          waiter->cv.notify_one();
        });
    if (!st.ok()) {
      // A model the request names: bad input, named ("model: adapter 'x' is not loaded ...").
      const std::string field = st.code() == StatusCode::kNotFound ? "model: " : "";
      return Reply(response, 400, openai::ErrorJson(field + st.message(), "invalid_request_error"));
    }
    openai::AnswerInfo info;
    info.endpoint = endpoint;
    info.id = (endpoint == openai::Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(n);
    info.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    info.model = parsed->model;
    const std::string adapter = parsed->model.find(':') != std::string::npos
                                    ? parsed->model.substr(parsed->model.find(':') + 1)
                                    : std::string();
    if (!parsed->stream) {
      std::unique_lock lock(waiter->mu);
      waiter->cv.wait(lock, [&] { return waiter->done; });
      info.fingerprint = Fingerprint(adapter, waiter->adapter_version);
      return Reply(response, 200,
                   openai::AnswerJson(info, waiter->text, waiter->finish, waiter->usage,
                                      parsed->return_token_ids ? &waiter->tokens : nullptr));
    }
    bool first = true;
    for (;;) {
      std::string text;
      bool done = false;
      {
        std::unique_lock lock(waiter->mu);
        waiter->cv.wait(lock, [&] { return waiter->done || !waiter->text.empty(); });
        text.swap(waiter->text);
        done = waiter->done;
        info.fingerprint = Fingerprint(adapter, waiter->adapter_version);
      }
      std::string events;
      if (!text.empty() || first) events += openai::ChunkEvent(info, text, "", first);
      first = false;
      if (done) {
        events += openai::ChunkEvent(info, "", waiter->finish, false);
        if (parsed->include_usage) events += openai::UsageEvent(info, waiter->usage);
        // Sent as a piece even when it is the only one (a generation done before this thread
        // woke): the answer is a stream either way. [DONE] is the body Finish seals.
        if (Status s = response.SendPiece(events, "text/event-stream"); !s.ok()) return s;
        auto out = response.Allocate(openai::kDoneEvent.size(), "text/event-stream");
        if (!out.ok()) return out.status();
        std::memcpy(out->data(), openai::kDoneEvent.data(), openai::kDoneEvent.size());
        return {};
      }
      if (Status s = response.SendPiece(events, "text/event-stream"); !s.ok()) {
        // The sequence runs to its end anyway; its text is dropped with the waiter.
        return s;
      }
    }
  }

  static std::string Fingerprint(const std::string& adapter, uint64_t version) {
    if (adapter.empty()) return "shoal-gpt-base";
    return "shoal-gpt-" + adapter + "-v" + std::to_string(version);
  }

  std::string ModelsJson() const {
    Json data = Json::array();
    data.push_back({{"id", name_}, {"object", "model"}, {"owned_by", "shoal"}});
    for (const auto& [name, version] : engine_->Adapters()) {
      data.push_back({{"id", name_ + ":" + name},
                      {"object", "model"},
                      {"owned_by", "shoal"},
                      {"parent", name_},
                      {"version", version}});
    }
    return Json({{"object", "list"}, {"data", data}}).dump() + "\n";
  }

  std::string StatsJson() const {
    const lm::EngineStats s = engine_->stats();
    Json adapters = Json::object();
    for (const auto& [name, version] : engine_->Adapters()) adapters[name] = version;
    return Json({{"model_name", name_},
                 {"steps", s.steps},
                 {"sequences", s.sequences},
                 {"prompt_tokens", s.prompt_tokens},
                 {"completion_tokens", s.completion_tokens},
                 {"active", s.active},
                 {"waiting", s.waiting},
                 {"max_active", s.max_active},
                 {"tokens_in_flight", s.load.tokens_in_flight},
                 {"adapter_puts", s.adapter_puts},
                 {"adapters", adapters}})
               .dump() +
           "\n";
  }

  // Loads the FL job's newest version of an adapter when it is newer than the one served.
  Status Follow(FollowedAdapter& f) {
    auto newest = f.feed->NewestVersion();
    if (!newest.ok()) return newest.status();
    if (f.loaded && newest->version <= f.version) return {};
    auto bytes = f.feed->FetchWeights(newest->version);
    if (!bytes.ok()) return bytes.status();
    std::optional<float> alpha = f.alpha;
    if (!alpha) {
      const Json status = Json::parse(newest->status_json, nullptr, false);
      alpha = FindLoraAlpha(status);
    }
    auto ad =
        lm::LoadLoraAdapter(std::as_bytes(std::span(bytes->safetensors)), base_->config, alpha);
    if (!ad.ok()) {
      return InvalidArgument("adapter '" + f.name + "' from FL job '" + f.job + "' version " +
                             std::to_string(bytes->version) + ": " + ad.status().message());
    }
    auto named = std::make_shared<lm::LoraAdapter>(**ad);
    named->name = f.name;
    named->version = bytes->version;
    engine_->PutAdapter(std::move(named));
    spdlog::info("inference: model '{}' adapter '{}' now FL job '{}' version {} (was {})", name_,
                 f.name, f.job, bytes->version, f.version);
    f.version = bytes->version;
    f.loaded = true;
    return {};
  }

  void CheckForNewVersion() {
    for (auto& f : followed_) {
      if (Status st = Follow(*f); !st.ok()) {
        spdlog::warn("inference: model '{}' adapter '{}': {}", name_, f->name, st.ToString());
      }
    }
  }

  std::string name_;
  std::shared_ptr<const lm::LmWeights> base_;
  std::unique_ptr<lm::LmEngine> engine_;
  static constexpr auto kLoadReportInterval = std::chrono::milliseconds(20);
  std::mutex report_mu_;
  LoadReport last_report_;
  std::chrono::steady_clock::time_point last_report_at_;
  std::vector<std::unique_ptr<FollowedAdapter>> followed_;
  std::chrono::milliseconds poll_{kDefaultSafetyPollMs};
  std::atomic<uint64_t> next_id_{1};
  CommitWatch watch_;
};

}  // namespace

Result<std::unique_ptr<Handler>> CreateLmHandler() {
  auto handler = std::make_unique<LmHandler>();
  if (Status st = handler->Init(); !st.ok()) return st;
  return std::unique_ptr<Handler>(std::move(handler));
}

}  // namespace shoal
