// Continuous batching for the shoal-gpt decoder: one scheduler thread steps every active
// sequence together, each at its own position with its own KV cache and adapter; requests that
// arrive join at the next step (their whole prompt prefilled in it) and finished ones leave
// after it. Adapters are put by name at any time: a sequence keeps the adapter version it
// started with to its end; sequences that start after the put take the new one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/serving/lm/lm_forward.h"
#include "shoal/serving/lm/lm_weights.h"
#include "shoal/serving/lm/sampler.h"

namespace shoal::lm {

struct GenerationRequest {
  std::string prompt;  // bytes: token ids 0..255
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;  // generation ends before the first of these, not included
  std::string adapter;            // "" for the base model
};

enum class FinishReason { kNone, kStop, kLength };
const char* FinishReasonName(FinishReason r);  // "stop", "length"

// What one step produced for one sequence, given on the scheduler thread (the sink must not
// block). `text` is what may be shown now: whole UTF-8 characters, nothing that could still
// turn out to be the start of a stop sequence.
struct GenerationEvent {
  int token = -1;  // the token sampled in this step (256: end of text)
  std::string_view text;
  bool done = false;
  FinishReason finish = FinishReason::kNone;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  uint64_t adapter_version = 0;
};
using GenerationSink = std::function<void(const GenerationEvent&)>;

struct EngineOptions {
  int max_sequences = 32;  // sequences stepped together; more wait to join
  int threads = 0;         // the scheduler's OpenMP threads (sgemm, attention); 0: every core
  bool int8 = false;       // the linears as int8 weights (QuantizeInt8)
};

// The engine's load as the autoscaler sees it (tokens in flight, docs/reference/metrics.md):
// a queued sequence counts its prompt (still to prefill) and its decode budget; a running one
// the tokens it may still decode. The decode budget is max_tokens bounded by the context:
// min(max_tokens, n_ctx - prompt tokens), an empty prompt being one token. A sequence that stops
// early (end of text, a stop sequence) gives back what it did not decode.
struct EngineLoad {
  uint64_t tokens_in_flight = 0;
  uint32_t running = 0;  // sequences in the step
  uint32_t queued = 0;   // sequences waiting to join it
  bool operator==(const EngineLoad&) const = default;
};
// Called with the load after every change (Submit, each step), outside the engine's lock, one
// call at a time and in the order the loads were taken (so the last call has the latest load);
// the sink must not block.
using LoadSink = std::function<void(const EngineLoad&)>;

struct EngineStats {
  uint64_t steps = 0;
  uint64_t sequences = 0;          // finished
  uint64_t prompt_tokens = 0;      // prefilled
  uint64_t completion_tokens = 0;  // sampled
  uint64_t adapter_puts = 0;
  int active = 0;
  int waiting = 0;
  int max_active = 0;  // the most sequences one step has run
  EngineLoad load;
};

class LmEngine {
 public:
  LmEngine(std::shared_ptr<const LmWeights> base, EngineOptions options);
  ~LmEngine();  // stops the scheduler; sequences still running end there, without an event
  LmEngine(const LmEngine&) = delete;
  LmEngine& operator=(const LmEngine&) = delete;

  const LmConfig& config() const { return base_->config; }
  // The scheduler thread (not started: the caller steps with StepOnce, as tests do).
  void Start();
  // kInvalidArgument naming the field for a request the model cannot run; kNotFound for an
  // adapter that is not loaded.
  Status Submit(GenerationRequest request, GenerationSink sink);
  // Adds or replaces the adapter of that name (between two steps).
  void PutAdapter(std::shared_ptr<const LoraAdapter> adapter);
  bool HasAdapter(const std::string& name) const;
  std::vector<std::pair<std::string, uint64_t>> Adapters() const;  // name, version
  // Admits what waits and runs one step; false when nothing was there to run.
  bool StepOnce();
  EngineStats stats() const;
  // Set before the first Submit.
  void SetLoadSink(LoadSink sink) { load_sink_ = std::move(sink); }

 private:
  struct Sequence;
  void Run();
  void Emit(Sequence& s, int token);
  // The load now (mu_ held) and its report to the sink (mu_ not held).
  EngineLoad LoadLocked() const;
  void ReportLoad();

  std::shared_ptr<const LmWeights> base_;
  EngineOptions options_;
  LmForward forward_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::map<std::string, std::shared_ptr<const LoraAdapter>> adapters_;
  bool stopping_ = false;
  EngineStats stats_;
  std::vector<std::unique_ptr<Sequence>> active_;  // the scheduler's own
  std::vector<StepInput> inputs_;
  std::thread thread_;
  LoadSink load_sink_;
  std::mutex report_mu_;           // one report at a time: taken and sent in order
  uint64_t tokens_in_flight_ = 0;  // mu_: the sum of every sequence's `charge`
};

}  // namespace shoal::lm
