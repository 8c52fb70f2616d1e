// The built-in `inference` handler: serves one model over the Open Inference Protocol v2. The
// model comes from an FL job (the job's architecture as a graph, each committed version's
// weights downloaded as safetensors from the gateway that started this instance) or from an
// ONNX file. Requests on the worker threads go through the dynamic batcher; with an FL source a
// watcher thread follows the job, compiles each new version beside the running one and swaps it
// in between batches.
//
// Settings come from the manifest's `inference:` block as SHOAL_INFER_* environment variables
// (shoal/control/node/manifest.cc writes them): MODEL, FL_JOB | ONNX, DEVICE, PRECISION, MAX_BATCH,
// MAX_DELAY_US, POLL_MS; SHOAL_GATEWAY is the gateway's URL.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "shoal/common/env.h"
#include "shoal/common/log.h"
#include "shoal/serving/executor/executor.h"
#include "shoal/serving/model/model_graph.h"
#ifdef SHOAL_WITH_ONNX
#include "shoal/serving/onnx/onnx.h"
#include "shoal/serving/onnxmodel/onnx_model.h"
#endif
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/runtime/instance/builtin_module.h"
#include "shoal/runtime/instance/handler.h"
#include "shoal/serving/handler/commit_watch.h"
#include "shoal/serving/handler/lm_handler.h"
#include "shoal/serving/handler/model_feed.h"
#include "shoal/serving/oip/dynamic_batcher.h"
#include "shoal/serving/oip/oip.h"

namespace shoal {
namespace {

using Json = nlohmann::json;

Result<inference::Precision> ParsePrecision(const std::string& s) {
  if (s == "fp32") return inference::Precision::kF32;
  if (s == "fp16") return inference::Precision::kF16;
  if (s == "bf16") return inference::Precision::kBF16;
  return InvalidArgument("SHOAL_INFER_PRECISION: fp32 | fp16 | bf16, got '" + s + "'");
}

// Where versions come from: compiles the graph with each version's weights.
class ModelSource {
 public:
  virtual ~ModelSource() = default;
  // The newest version available, compiled; `after` skips the work when nothing is newer
  // (returns null then).
  virtual Result<std::shared_ptr<ServingModel>> LoadNewest(uint64_t after) = 0;
  virtual bool Follows() const = 0;  // whether new versions appear (FL jobs)
  const inference::Graph& graph() const { return graph_; }

 protected:
  inference::Graph graph_;
};

class OnnxSource final : public ModelSource {
 public:
  OnnxSource(std::string path, inference::Executor& executor, inference::ExecutorOptions options)
      : path_(std::move(path)), executor_(executor), options_(options) {}
  bool Follows() const override { return false; }
  Result<std::shared_ptr<ServingModel>> LoadNewest(uint64_t after) override {
    if (after >= 1) return std::shared_ptr<ServingModel>();
#ifdef SHOAL_WITH_ONNX
    auto graph = inference::LoadOnnx(path_);
    if (!graph.ok()) return graph.status();
    graph_ = std::move(*graph);
#else
    return Unavailable("this shoal-fn was built without ONNX support (libonnx-dev)");
#endif
    auto exe = executor_.Compile(graph_, options_);
    if (!exe.ok()) return exe.status();
    auto m = std::make_shared<ServingModel>();
    m->executable = std::move(*exe);
    m->version = 1;
    return m;
  }

 private:
  std::string path_;
  inference::Executor& executor_;
  inference::ExecutorOptions options_;
};

class FlJobSource final : public ModelSource {
 public:
  FlJobSource(std::string gateway, std::string job, inference::Executor& executor,
              inference::ExecutorOptions options)
      : job_(job),
        feed_(MakeFlModelFeed(std::move(gateway), std::move(job))),
        executor_(executor),
        options_(options) {}
  bool Follows() const override { return true; }

  Result<std::shared_ptr<ServingModel>> LoadNewest(uint64_t after) override {
    auto status = feed_->NewestVersion();
    if (!status.ok()) return status.status();
    if (architecture_.empty()) {
      // Its widths too: a digits job's MLP takes 64 inputs, not Fashion-MNIST's 784.
      auto job = inference::JobArchitectureFromStatus(status->status_json);
      if (!job.ok()) return Internal("FL job '" + job_ + "': " + job.status().message());
      if (!job->onnx.empty()) {
        // spec.model.onnx: the file's graph, its float initializers replaced per version.
#ifdef SHOAL_WITH_ONNX
        auto m = inference::OnnxModel(job->onnx);
        if (!m.ok()) return m.status();
        auto g = inference::LoadOnnx(job->onnx, {.fold_batchnorm = false});
        if (!g.ok()) return g.status();
        spec_ = m->spec;
        onnx_graph_ = std::move(*g);
        onnx_ = true;
#else
        return Unavailable("FL job '" + job_ + "' serves an ONNX model; no ONNX reader here");
#endif
      } else {
        auto spec = model::ArchitectureSpec(job->name, job->options);
        if (!spec.ok()) return spec.status();
        spec_ = std::move(*spec);
      }
      // Only once the model's spec is known: a failure above is retried from the start.
      architecture_ = job->name;
      arch_options_ = job->options;
    }
    if (have_graph_ && status->version <= after) return std::shared_ptr<ServingModel>();
    auto bytes = feed_->FetchWeights(status->version);
    if (!bytes.ok()) return bytes.status();
    auto model = model::ModelFromSafetensors(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes->safetensors.data()),
                                   bytes->safetensors.size()),
        spec_);
    if (!model.ok()) return model.status();
    if (onnx_) {
      // The file's graph with this version's tensors, BatchNormalization folded afterwards.
      graph_ = onnx_graph_;
      if (Status st = graph_.SetWeights(inference::WeightsOf(*model)); !st.ok()) return st;
      if (Status st = inference::FoldBatchNorm(graph_); !st.ok()) return st;
      have_graph_ = true;
    } else if (!have_graph_) {
      auto graph = inference::GraphFromArchitecture(architecture_, arch_options_, *model);
      if (!graph.ok()) return graph.status();
      graph_ = std::move(*graph);
      have_graph_ = true;
    } else {
      // Only the weights change between versions: the graph stays and its initializers are
      // replaced (the FL tensor names are the initializer names).
      if (Status st = graph_.SetWeights(inference::WeightsOf(*model)); !st.ok()) return st;
    }
    auto exe = executor_.Compile(graph_, options_);
    if (!exe.ok()) return exe.status();
    auto m = std::make_shared<ServingModel>();
    m->executable = std::move(*exe);
    m->version = bytes->version;
    return m;
  }

 private:
  std::string job_;
  std::unique_ptr<ModelFeed> feed_;
  inference::Executor& executor_;
  inference::ExecutorOptions options_;
  std::string architecture_;
  model::ArchitectureOptions arch_options_;
  model::ModelSpec spec_;
  bool have_graph_ = false;
  bool onnx_ = false;            // spec.model.onnx
  inference::Graph onnx_graph_;  // the file's graph, unfolded
};

class InferenceHandler final : public Handler {
 public:
  ~InferenceHandler() override {
    watch_.Stop();
    batcher_.reset();
  }

  Status Init() {
    info_.name = EnvString("SHOAL_INFER_MODEL", EnvString("SHOAL_FUNCTION").c_str());
    info_.max_batch = static_cast<int64_t>(EnvUint("SHOAL_INFER_MAX_BATCH", 32));
    const auto delay = std::chrono::microseconds(EnvUint("SHOAL_INFER_MAX_DELAY_US", 2000));
    poll_ = std::chrono::milliseconds(EnvUint("SHOAL_INFER_POLL_MS", kDefaultSafetyPollMs));
    auto precision = ParsePrecision(EnvString("SHOAL_INFER_PRECISION", "fp32"));
    if (!precision.ok()) return precision.status();
    const std::string device = EnvString("SHOAL_INFER_DEVICE", "auto");
    auto executor = inference::CreateExecutor(device);
    if (!executor.ok()) return executor.status();
    executor_ = std::move(*executor);
    inference::ExecutorOptions options;
    options.precision = *precision;
    options.max_batch = info_.max_batch;
    // The batching thread is the only caller of the model; the workers parse requests.
    options.threads = static_cast<int>(EnvUint("SHOAL_INFER_THREADS", 0));

    const std::string job = EnvString("SHOAL_INFER_FL_JOB");
    const std::string onnx = EnvString("SHOAL_INFER_ONNX");
    if (!job.empty()) {
      const std::string gateway = EnvString("SHOAL_GATEWAY");
      if (gateway.empty()) return InvalidArgument("SHOAL_GATEWAY is not set (started by shoald?)");
      source_ = std::make_unique<FlJobSource>(gateway, job, *executor_, options);
      info_.platform = "shoal-fl";
    } else if (!onnx.empty()) {
      source_ = std::make_unique<OnnxSource>(onnx, *executor_, options);
      info_.platform = "onnx";
    } else {
      return InvalidArgument("set SHOAL_INFER_FL_JOB or SHOAL_INFER_ONNX");
    }
    // The job may not have committed anything yet, or the gateway may still be starting: try
    // for a few seconds before giving up (shoald restarts the instance with back-off).
    Result<std::shared_ptr<ServingModel>> first = Unavailable("not tried");
    for (int attempt = 0; attempt < 50; ++attempt) {
      first = source_->LoadNewest(0);
      if (first.ok() || first.status().code() == StatusCode::kInvalidArgument) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!first.ok()) return first.status();
    const inference::Graph& g = source_->graph();
    if (g.inputs.size() != 1 || g.outputs.size() != 1) {
      return InvalidArgument("model '" + info_.name + "' must have one input and one output");
    }
    info_.input_name = g.inputs[0].name;
    info_.output_name = g.outputs[0].name;
    info_.input_shape = (*first)->executable->input_shape();
    info_.output_shape = (*first)->executable->output_shape();
    spdlog::info(
        "inference: model '{}' version {} on {} ({}), input {} {}, output {} {}, "
        "max batch {}, max queue delay {} us",
        info_.name, (*first)->version, executor_->name(), inference::PrecisionName(*precision),
        info_.input_name, oip::ShapeText(info_.input_shape), info_.output_name,
        oip::ShapeText(info_.output_shape), info_.max_batch, delay.count());
    LogExecution(**first);
    delay_ = delay;
    first_ = std::move(*first);
    return {};
  }

  // The batcher's and the watcher's threads, per instance (after a zygote's fork).
  Status OnInstanceStart() override {
    batcher_ = std::make_unique<DynamicBatcher>(BatcherOptions{info_.max_batch, delay_},
                                                std::move(first_));
    if (source_->Follows()) watch_.Start(poll_, [this] { CheckForNewVersion(); });
    return {};
  }

  bool MayBlock() const override { return true; }
  void OnJobCommitted(uint64_t /*version*/) override { watch_.Notify(); }

  Status Handle(const Request& request, ResponseBuilder& response) override {
    std::string_view path = request.path;
    // /versions/{v}/...: only the version being served answers.
    if (path.starts_with("/versions/")) {
      path.remove_prefix(10);
      const size_t slash = path.find('/');
      const std::string_view v = path.substr(0, slash);
      path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash);
      const uint64_t serving = batcher_->current()->version;
      if (v != std::to_string(serving)) {
        return NotFound("model '" + info_.name + "' version " + std::string(v) +
                        " is not loaded (serving version " + std::to_string(serving) + ")");
      }
    }
    if (path == "/") path = {};
    const bool post = request.method == "POST";
    if (post && (path.empty() || path == "/infer")) return Infer(request, response);
    if (!post && path.empty()) {
      return Reply(response, oip::ModelMetadataJson(info_, batcher_->current()->version));
    }
    if (!post && path == "/ready") {
      return Reply(response, "{\"name\":\"" + info_.name + "\",\"ready\":true}\n");
    }
    if (!post && path == "/stats") return Reply(response, StatsJson());
    return NotFound("no inference route " + std::string(request.method) + " " +
                    std::string(request.path) + " (POST /infer, GET /, /ready, /stats)");
  }

 private:
  Status Infer(const Request& request, ResponseBuilder& response) {
    // Per worker thread, reused: a request allocates nothing for its tensors once warm.
    thread_local std::vector<float> input;
    thread_local std::vector<float> output;
    thread_local std::string body;
    thread_local oip::InferRequest parsed;
    thread_local std::string inflated;
    auto header = oip::BinaryHeaderLength(request.query);
    if (!header.ok()) return header.status();
    // A compressed body (Content-Encoding gzip or deflate) can be no larger than the largest
    // request the model takes: every value of a full batch in JSON, 64 bytes each at most.
    const size_t max_bytes =
        static_cast<size_t>(info_.max_batch * info_.input_elements()) * 64 + (1u << 20);
    auto decoded = oip::DecodeBody(request.query, request.body, max_bytes, inflated);
    if (!decoded.ok()) return decoded.status();
    if (Status st = oip::ParseInferRequest(*decoded, *header, info_, input, &parsed); !st.ok()) {
      return st;
    }
    output.resize(static_cast<size_t>(parsed.batch * info_.output_elements()));
    auto version = batcher_->Infer(parsed.input, parsed.batch, output);
    if (!version.ok()) {
      return version.status().code() == StatusCode::kInvalidArgument
                 ? Internal("inference failed: " + version.status().message())
                 : version.status();
    }
    size_t json_length = 0;
    oip::WriteInferResponse(info_, parsed, *version, output, body, &json_length);
    if (parsed.binary_output) {
      // The gateway turns this content-type parameter into the Inference-Header-Content-Length
      // response header.
      char type[96];
      std::snprintf(type, sizeof type,
                    "application/octet-stream; inference-header-content-length=%zu", json_length);
      return Write(response, body, type);
    }
    return Write(response, body, "application/json");
  }

  static Status Write(ResponseBuilder& response, std::string_view bytes, std::string_view type) {
    auto out = response.Allocate(bytes.size(), type);
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), bytes.data(), bytes.size());
    return {};
  }
  static Status Reply(ResponseBuilder& response, const std::string& json) {
    return Write(response, json, "application/json");
  }

  // CUDA: whether each batch-size bucket replays a captured graph or runs kernel by kernel,
  // and why (a failed capture is not retried: it runs eagerly for the model's life).
  void LogExecution(const ServingModel& m) const {
    const inference::ExecutionMode e = m.executable->execution_mode();
    if (e.graph_buckets + e.eager_buckets == 0) return;  // the CPU executor: no buckets
    if (e.eager_buckets == 0) {
      spdlog::info("inference: model '{}' version {}: CUDA graphs for all {} batch buckets",
                   info_.name, m.version, e.graph_buckets);
    } else {
      spdlog::warn(
          "inference: model '{}' version {}: {} of {} batch buckets run eagerly, "
          "without CUDA graphs: {}",
          info_.name, m.version, e.eager_buckets, e.graph_buckets + e.eager_buckets,
          e.eager_reason);
    }
  }

  std::string StatsJson() const {
    const BatcherStats s = batcher_->stats();
    const inference::ExecutionMode e = batcher_->current()->executable->execution_mode();
    Json hist = Json::object();
    for (size_t rows = 1; rows < s.batch_rows_histogram.size(); ++rows) {
      if (s.batch_rows_histogram[rows]) hist[std::to_string(rows)] = s.batch_rows_histogram[rows];
    }
    Json j = {{"model_name", info_.name},
              {"model_version", std::to_string(batcher_->current()->version)},
              {"requests", s.requests},
              {"batches", s.batches},
              {"rows", s.rows},
              {"failed_batches", s.failed_batches},
              {"swaps", s.swaps},
              {"batch_rows_histogram", hist},
              {"execution",
               {{"graph_buckets", e.graph_buckets},
                {"eager_buckets", e.eager_buckets},
                {"eager_reason", e.eager_reason}}}};
    return j.dump() + "\n";
  }

  // Follows the FL job (on the CommitWatch's thread, at each commit notice): each new committed
  // version is downloaded and compiled here, beside the running one, then swapped in for the
  // next batch.
  void CheckForNewVersion() {
    const uint64_t serving = batcher_->current()->version;
    auto next = source_->LoadNewest(serving);
    if (!next.ok()) {
      spdlog::warn("inference: model '{}': cannot load a new version: {}", info_.name,
                   next.status().ToString());
    } else if (*next && (*next)->version > serving) {
      const uint64_t v = (*next)->version;
      LogExecution(**next);
      batcher_->Swap(std::move(*next));
      spdlog::info("inference: model '{}' now serves version {} (was {})", info_.name, v, serving);
    }
  }

  oip::ModelInfo info_;
  std::unique_ptr<inference::Executor> executor_;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<DynamicBatcher> batcher_;
  std::shared_ptr<ServingModel> first_;  // loaded by Init, served from OnInstanceStart
  std::chrono::microseconds delay_{0};
  std::chrono::milliseconds poll_{kDefaultSafetyPollMs};
  CommitWatch watch_;
};

}  // namespace

Result<std::unique_ptr<Handler>> CreateInferenceHandler() {
#ifdef SHOAL_WITH_LM
  if (!EnvString("SHOAL_INFER_LM_BASE").empty()) return CreateLmHandler();
#else
  if (!EnvString("SHOAL_INFER_LM_BASE").empty()) {
    return Unavailable("this shoal-fn was built without the language-model runtime (oneDNN)");
  }
#endif
  auto handler = std::make_unique<InferenceHandler>();
  if (Status st = handler->Init(); !st.ok()) return st;
  return std::unique_ptr<Handler>(std::move(handler));
}

}  // namespace shoal

SHOAL_BUILTIN_MODULE(shoal::CreateInferenceHandler)
