// The FL leaf aggregator: folds each model update it receives, in place in the job's pool,
// into the partial sum the coordinator named for it (Σ c_k x_k), with the vectorised fold
// kernel or, where a GPU is present and the job allows it (spec.aggregation.device, passed as
// SHOAL_FL_AGG_DEVICE), with the GPU fold. The coordinator adds the leaves' partial sums and
// applies the algorithm's final step; nothing here knows which algorithm runs.
//
// GPU path: the partial sum lives in the pool (the coordinator reads it at commit, and a
// restarted leaf's sum is rebuilt there), so each update is folded on the device into the
// pool's partial sum through the registered pool: acc and update chunks in, acc chunks out,
// pipelined. That moves 12 bytes per f32 element over PCIe instead of the 4 a device-resident
// accumulator would need; the protocol (202 only once the update is in the pool's sum) asks
// for it.
#include "shoal/fl/leaf/fl_leaf_handler.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/kernels/fold_u32.h"
#include "shoal/fl/leaf/streamed_fold.h"
#include "shoal/fl/lora/lora_fold.h"
#include "shoal/fl/lora/lora_spec.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/interfaces/fl_leaf_env.h"
#ifdef SHOAL_FL_ONNX
#include "shoal/serving/onnxmodel/onnx_model.h"
#endif
#if defined(SHOAL_HAVE_GPU_FOLD)
#include "shoal/fl/gpu/gpu_fold.h"
#endif

namespace shoal {
namespace {

class FlLeafHandler final : public Handler {
 public:
  FlLeafHandler(model::ModelSpec spec, const FlLeafOptions& options,
                std::unique_ptr<LeafDeviceFolder> device)
      : spec_(std::move(spec)), options_(options), device_(std::move(device)) {
    std::string by = " (spec.aggregation.wireFormats: ";
    for (size_t i = 0; i < options_.wire_formats.size(); ++i) {
      by += (i ? ", " : "") + std::string(model::UpdateDTypeLabel(options_.wire_formats[i]));
    }
    by += ")";
    for (model::ParseLimits* l : {&limits_, &unscanned_}) {
      l->allowed_dtypes = options_.wire_formats;
      l->allowed_by = by;
      l->lora_lower_rank = options_.lora_lower_rank;
    }
  }
  ~FlLeafHandler() override {
    if (attach_thread_.joinable()) attach_thread_.join();
  }
  bool MayBlock() const override { return false; }
  // Every update is read whole (scanned, folded): no fault per 4 KiB (handler.h).
  bool PopulatesPool() const override { return true; }

  // A zygote loads the handler and attaches the pool, then forks: nothing here may start a
  // thread (a fork copies only the caller) or touch the device (a CUDA context does not survive
  // a fork). The fold threads and the device attach start in the instance (OnInstanceStart);
  // an unforked caller that attaches in the foreground (tests) attaches here.
  void OnPoolAttached(void* base, size_t bytes) override {
    pool_base_ = base;
    pool_bytes_ = bytes;
    if (!options_.attach_in_background) AttachDevice();
  }

  Status OnInstanceStart() override {
    if (!threads_) threads_ = std::make_unique<aggregator::FoldPool>();
    if (options_.attach_in_background) AttachDevice();
    return {};
  }

  void AttachDevice() {
    void* const base = pool_base_;
    const size_t bytes = pool_bytes_;
    if (base == nullptr) return;
    if (options_.device == LeafFoldDevice::kCpu) {
      spdlog::info("fl-leaf: folding on the CPU ({}): spec.aggregation.device is cpu",
                   aggregator::FoldIsa());
      return;
    }
    if (!device_) return;  // the factory said why
    auto attach = [this, base, bytes] {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = device_->Attach(base, bytes);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!st.ok()) {
        spdlog::warn("fl-leaf: folding on the CPU: cannot attach the pool to the {}: {}",
                     device_->Describe(), st.ToString());
        return;
      }
      const bool forced = options_.device == LeafFoldDevice::kGpu;
      spdlog::info(
          "fl-leaf: folding on the {} for updates >= {} bytes ({}); pool attached ({} "
          "MiB in {:.2f} s)",
          device_->Describe(), forced ? 0 : options_.device_min_update_bytes,
          forced ? "device: gpu" : "device: auto", bytes >> 20, s);
      device_ready_.store(true, std::memory_order_release);
    };
    // Pinning the pool takes about 0.9 s per GiB: done beside the event loop, which folds on
    // the CPU until it is finished.
    if (options_.attach_in_background) {
      attach_thread_ = std::thread(attach);
    } else {
      attach();
    }
  }

  // The gateway announces an FL update's tensor area as it lands (kBodyChunk): the plain CPU
  // fold takes each part then. A robust job (no fold: the rule needs every update whole at
  // commit), secure aggregation (masked inputs, folded after the body: small next to the
  // round's key exchange) and updates the device folds (it folds whole updates) wait for
  // Handle.
  void OnBodyArriving(const Request& request) override {
    if (!options_.fold || options_.fold_u32) return;
    if (!threads_) threads_ = std::make_unique<aggregator::FoldPool>();
    StreamedFold* stream = FindStream(request.body.data());
    if (stream == nullptr) {
      stream = StartStream(request);
      if (stream == nullptr) return;
    }
    stream->Advance(request.arrived, nullptr);  // a bad value stops it; Handle answers
  }

  Status Handle(const Request& request, ResponseBuilder& response) override {
    // The structure first (no pass over the values); the values are read once after that: on
    // the CPU the NaN/Inf test and the fold in one pass, block by block; the parser's own scan
    // only to name what is wrong.
    if (!threads_) threads_ = std::make_unique<aggregator::FoldPool>();  // never started
    std::optional<StreamedFold> stream = TakeStream(request.body.data());
    if (request.client_gone) {
      // Nothing of it counts: the coordinator rebuilds the partial sum without it.
      if (stream && stream->folded_any()) response.MarkAuxChanged();
      return InvalidArgument("the client left before its update arrived whole");
    }
    if (options_.fold_u32) return HandleMasked(request, response);
    auto view = model::ParseUpdate(request.body, spec_, unscanned_);
    if (!view.ok()) return view.status();
    if (stream && stream->acc() == reinterpret_cast<float*>(request.aux.data())) {
      // Folded while it arrived: the rest now; a bad value refused as below.
      if (stream->Advance(request.body.size(), threads_.get())) {
        return Accepted(view->meta, response);
      }
      if (stream->folded_any()) response.MarkAuxChanged();
      return Named(request);
    }
    if (stream && stream->folded_any()) {
      // Never happens (the gateway stamps one partial sum per update); were it to, the part
      // folded elsewhere is undone by the rebuild and the update folds whole here.
      response.MarkAuxChanged();
    }
    // A robust job only validates: the plain scan, vectorised on the fold's threads.
    if (!options_.fold) return AllFinite(*view) ? Accepted(view->meta, response) : Named(request);
    const uint64_t need = spec_.num_params() * sizeof(float);
    if (request.aux.size() < need) {
      if (!AllFinite(*view)) return Named(request);
      return Internal("no partial-sum buffer for this update (" +
                      std::to_string(request.aux.size()) + " bytes, need " + std::to_string(need) +
                      ")");
    }
    auto* acc = reinterpret_cast<float*>(request.aux.data());
    if (LowerRank(*view)) {
      // A HetLoRA client below the job's rank: scanned, then folded zero-padded on the CPU (a
      // few rows per tensor: no device round trip is worth it).
      if (!AllFinite(*view)) return Named(request);
      lora::FoldUpdate(acc, spec_, *view, request.aux_value);
      return Accepted(view->meta, response);
    }
    segments_.clear();
    uint64_t bytes = 0;
    bool quantized = false;  // folded on the CPU: the device folder takes f32/bf16/f16
    for (const model::TensorView& t : view->tensors) {
      segments_.push_back(
          {acc + spec_.offset(t.index), t.data, t.dtype, t.numel, request.aux_value});
      bytes += t.length;
      quantized = quantized || IsQuantizedDType(t.dtype);
    }
    if (!quantized && UseDevice(bytes)) {
      // The device folds what is in the pool: scanned before, on the CPU.
      if (!AllFinite(*view)) return Named(request);
      if (Status st = device_->Fold(segments_); !st.ok()) return DeviceFailed(st);
      return Accepted(view->meta, response);
    }
    bool folded = false;
    for (const aggregator::FoldSegment& s : segments_) {
      const auto r = threads_->FoldFinite(s.acc, s.x, s.dtype, s.n, s.w);
      folded = folded || r.folded;
      if (!r.finite) {
        // Refused as before (400, the value named), but the blocks before it are in the
        // partial sum: the reply says so and the coordinator rebuilds that sum from its
        // acknowledged updates before it commits (fl_data_path.h, PartialChanged).
        if (folded) response.MarkAuxChanged();
        return Named(request);
      }
    }
    return Accepted(view->meta, response);
  }

 private:
  // Secure aggregation: a masked input (U32 tensors, any bits) folded into the u32 partial sum
  // by wrapping adds; the partial sum stays masked (only the top unmasks, at commit).
  Status HandleMasked(const Request& request, ResponseBuilder& response) {
    auto view = model::ParseUpdate(request.body, spec_, masked_);
    if (!view.ok()) {
      if (view.status().message().ends_with("not allowed")) {
        return InvalidArgument(view.status().message() +
                               " (this job aggregates securely: masked U32 inputs only, see "
                               "spec.privacy.secureAggregation)");
      }
      return view.status();
    }
    const uint64_t need = spec_.num_params() * sizeof(uint32_t);
    if (request.aux.size() < need) {
      return Internal("no partial-sum buffer for this update (" +
                      std::to_string(request.aux.size()) + " bytes, need " + std::to_string(need) +
                      ")");
    }
    auto* acc = reinterpret_cast<uint32_t*>(request.aux.data());
    for (const model::TensorView& t : view->tensors) {
      threads_->FoldU32(acc + spec_.offset(t.index), t.data, t.numel);
    }
    return Accepted(view->meta, response);
  }

  bool LowerRank(const model::UpdateView& view) const {
    if (!options_.lora_lower_rank) return false;
    for (const model::TensorView& t : view.tensors) {
      if (t.lora_rank != 0 && t.numel != spec_.tensor(t.index).numel()) return true;
    }
    return false;
  }

  StreamedFold* FindStream(const std::byte* body) {
    for (StreamedFold& s : streams_) {
      if (s.body() == body) return &s;
    }
    return nullptr;
  }
  std::optional<StreamedFold> TakeStream(const std::byte* body) {
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].body() != body) continue;
      std::optional<StreamedFold> s(std::move(streams_[i]));
      streams_.erase(streams_.begin() + static_cast<ptrdiff_t>(i));
      return s;
    }
    return std::nullopt;
  }
  // The stream of an update whose head and tensor table have landed, when the CPU folds it.
  StreamedFold* StartStream(const Request& request) {
    const uint64_t need = spec_.num_params() * sizeof(float);
    if (request.aux.size() < need || streams_.size() >= kMaxStreams) return nullptr;
    auto hlen = model::ParsePrefix(
        request.body.first(std::min<uint64_t>(request.arrived, request.body.size())),
        request.body.size());
    if (!hlen.ok() || request.arrived < model::TensorAreaOffset(*hlen)) return nullptr;
    // The structure only (the tensor table against the model and the declared length): the
    // values are scanned as they are folded.
    auto view = model::ParseUpdate(request.body, spec_, unscanned_);
    if (!view.ok()) return nullptr;  // Handle refuses it with the parser's message
    // A HetLoRA adapter below the job's rank is folded zero-padded, once whole.
    if (LowerRank(*view)) return nullptr;
    uint64_t bytes = 0;
    bool quantized = false;
    for (const model::TensorView& t : view->tensors) {
      bytes += t.length;
      quantized = quantized || IsQuantizedDType(t.dtype);
    }
    if (!quantized && UseDevice(bytes)) return nullptr;
    streams_.emplace_back(*view, spec_, request.body.data(),
                          reinterpret_cast<float*>(request.aux.data()), request.aux_value);
    return &streams_.back();
  }

  bool AllFinite(const model::UpdateView& view) {
    for (const model::TensorView& t : view.tensors) {
      if (!threads_->AllFinite(t.data, t.dtype, t.numel)) return false;
    }
    return true;
  }
  // A non-finite update's answer: the parser's own scan names the tensor and the index.
  Status Named(const Request& request) {
    auto named = model::ParseUpdate(request.body, spec_, limits_);
    return named.ok() ? InvalidArgument("update has non-finite values") : named.status();
  }

  static Status Accepted(const model::UpdateMeta& meta, ResponseBuilder& response) {
    const std::string json = "{\"accepted\":true,\"client_id\":\"" + meta.client_id +
                             "\",\"base_version\":" + std::to_string(meta.base_version) + "}\n";
    auto out = response.Allocate(json.size(), "application/json");
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), json.data(), json.size());
    response.SetStatus(202);
    return {};
  }

  bool UseDevice(uint64_t update_bytes) const {
    if (!device_ready_.load(std::memory_order_acquire)) return false;
    return options_.device == LeafFoldDevice::kGpu ||
           update_bytes >= options_.device_min_update_bytes;
  }

  // The partial sum may hold part of this update, so it cannot be folded again here: the
  // update is refused with 502 (kUnavailable), which tells the coordinator to rebuild the
  // partial sum from the acknowledged updates before it commits (and counts the fallback), and
  // the client to send it again. This instance folds on the CPU from now on.
  Status DeviceFailed(const Status& st) {
    device_ready_.store(false, std::memory_order_release);
    const std::string what = device_->Describe();
    spdlog::error(
        "fl-leaf: the {} fold failed, folding on the CPU from now on; the update is "
        "refused (502) and the partial sum rebuilt by the coordinator: {}",
        what, st.ToString());
    device_.reset();  // frees its device memory and unpins the pool (best effort)
    return Unavailable("the " + what + " fold failed (" + st.message() +
                       "); the leaf folds on the CPU now: send the update again");
  }

  model::ModelSpec spec_;
  model::ParseLimits limits_;
  model::ParseLimits masked_ = [] {
    model::ParseLimits l;
    l.check_finite = false;
    l.allowed_dtypes = {DType::kU32};
    return l;
  }();
  model::ParseLimits unscanned_ = [] {
    model::ParseLimits l;
    l.check_finite = false;
    return l;
  }();
  // One large update is split across the machine's cores (bit-identical to one thread);
  // started in the instance, after the zygote's fork.
  std::unique_ptr<aggregator::FoldPool> threads_;
  void* pool_base_ = nullptr;
  size_t pool_bytes_ = 0;
  FlLeafOptions options_;
  std::unique_ptr<LeafDeviceFolder> device_;
  std::vector<aggregator::FoldSegment> segments_;
  // Updates being folded while they arrive (at most the leaf's fan-in are in flight).
  static constexpr size_t kMaxStreams = 64;
  std::vector<StreamedFold> streams_;
  std::atomic<bool> device_ready_{false};
  std::thread attach_thread_;
};

#if defined(SHOAL_HAVE_GPU_FOLD)
class GpuLeafFolder final : public LeafDeviceFolder {
 public:
  explicit GpuLeafFolder(std::unique_ptr<aggregator::GpuFolder> folder)
      : folder_(std::move(folder)) {}
  std::string Describe() const override {
    return "GPU (device " + std::to_string(folder_->device()) + ")";
  }
  Status Attach(void* base, size_t bytes) override { return folder_->RegisterHost(base, bytes); }
  Status Fold(std::span<const aggregator::FoldSegment> segments) override {
    return folder_->FoldHost(segments);
  }

 private:
  std::unique_ptr<aggregator::GpuFolder> folder_;
};
#endif

}  // namespace

Result<std::unique_ptr<LeafDeviceFolder>> CreateGpuLeafFolder() {
#if defined(SHOAL_HAVE_GPU_FOLD)
  std::string why;
  if (!aggregator::GpuFoldAvailable(&why)) return Unavailable(why);
  auto folder = aggregator::GpuFolder::Create();
  if (!folder.ok()) return folder.status();
  return std::unique_ptr<LeafDeviceFolder>(new GpuLeafFolder(std::move(*folder)));
#else
  return Unavailable("this build has no CUDA");
#endif
}

std::unique_ptr<Handler> CreateFlLeafHandler(model::ModelSpec spec, const FlLeafOptions& options,
                                             std::unique_ptr<LeafDeviceFolder> device) {
  return std::make_unique<FlLeafHandler>(std::move(spec), options, std::move(device));
}

Result<std::unique_ptr<Handler>> CreateFlLeafHandler() {
  const char* arch = std::getenv(fl_leaf_env::kArchitecture);
  const char* hidden = std::getenv(fl_leaf_env::kHidden);
  const char* device = std::getenv(fl_leaf_env::kAggregationDevice);
  model::ArchitectureOptions opts;
  if (hidden != nullptr && *hidden != '\0') opts.hidden = {std::strtoull(hidden, nullptr, 10)};
  const char* inputs = std::getenv(fl_leaf_env::kInputs);  // default 784
  if (inputs != nullptr && *inputs != '\0') opts.inputs = std::strtoull(inputs, nullptr, 10);
  const char* onnx = std::getenv(fl_leaf_env::kOnnx);           // spec.model.onnx
  const char* lora_rank = std::getenv(fl_leaf_env::kLoraRank);  // spec.model.lora
  Result<model::ModelSpec> spec = InvalidArgument("unset");
  FlLeafOptions options;
  if (lora_rank != nullptr && *lora_rank != '\0') {
    const char* shape = std::getenv(fl_leaf_env::kLoraShape);
    const char* targets = std::getenv(fl_leaf_env::kLoraTargets);
    const char* method = std::getenv(fl_leaf_env::kLoraMethod);
    const uint64_t r = std::strtoull(lora_rank, nullptr, 10);
    lora::BaseConfig base;
    char* end = nullptr;
    if (shape != nullptr) {
      base.d_model = std::strtoull(shape, &end, 10);
      if (end != nullptr && *end == ',') base.n_layer = std::strtoull(end + 1, nullptr, 10);
    }
    if (r == 0 || r > 65536 || base.d_model == 0 || base.n_layer == 0) {
      return InvalidArgument(std::string(fl_leaf_env::kLoraRank) + "/" + fl_leaf_env::kLoraShape +
                             ": the coordinator could not read spec.model.lora.base");
    }
    spec = lora::AdapterSpec(base, static_cast<uint32_t>(r),
                             lora::SplitTargets(targets != nullptr ? targets : ""));
    options.lora_lower_rank = method != nullptr && std::string_view(method) == "hetlora";
  } else if (onnx != nullptr && *onnx != '\0') {
#ifdef SHOAL_FL_ONNX
    auto m = inference::OnnxModel(onnx);
    if (!m.ok()) return m.status();
    spec = m->spec;
#else
    return InvalidArgument("spec.model.onnx: this build has no ONNX reader");
#endif
  } else {
    spec = model::ArchitectureSpec(arch ? arch : "mlp", opts);
  }
  if (!spec.ok()) return spec.status();
  const char* fold = std::getenv(fl_leaf_env::kFold);  // default sum
  const std::string f = fold ? fold : "sum";
  if (f == "none") {
    options.fold = false;
  } else if (f == "u32") {
    options.fold_u32 = true;
  } else if (f != "sum" && !f.empty()) {
    return InvalidArgument(std::string(fl_leaf_env::kFold) + ": unknown mode '" + f +
                           "' (sum, none, u32)");
  }
  if (const char* wf = std::getenv(fl_leaf_env::kWireFormats); wf != nullptr && *wf != '\0') {
    options.wire_formats.clear();
    std::string_view rest = wf;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view name = rest.substr(0, comma);
      const std::optional<DType> d = model::UpdateDTypeFromName(name);
      if (!d) {
        return InvalidArgument(std::string(fl_leaf_env::kWireFormats) + ": unknown format '" +
                               std::string(name) + "' (" + std::string(model::kUpdateDTypeNames) +
                               ")");
      }
      options.wire_formats.push_back(*d);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  const std::string d = device ? device : "auto";
  if (d == "cpu") {
    options.device = LeafFoldDevice::kCpu;
  } else if (d == "gpu") {
    options.device = LeafFoldDevice::kGpu;
  } else if (d != "auto" && !d.empty()) {
    return InvalidArgument(std::string(fl_leaf_env::kAggregationDevice) + ": unknown device '" + d +
                           "' (auto, cpu, gpu)");
  }
  std::unique_ptr<LeafDeviceFolder> gpu;
  if (options.device != LeafFoldDevice::kCpu && options.fold && !options.fold_u32) {
    auto folder = CreateGpuLeafFolder();
    if (folder.ok()) {
      gpu = std::move(*folder);
    } else {
      spdlog::log(
          options.device == LeafFoldDevice::kGpu ? spdlog::level::warn : spdlog::level::info,
          "fl-leaf: folding on the CPU ({}): {}", aggregator::FoldIsa(), folder.status().message());
    }
  }
  return CreateFlLeafHandler(std::move(*spec), options, std::move(gpu));
}

}  // namespace shoal
