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
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shoal/aggregator/fold.h"
#include "shoal/model/architectures.h"
#include "shoal/model/update_format.h"
#include "shoal/runtime/builtin_module.h"
#include "shoal/runtime/handler.h"
#if defined(SHOAL_HAVE_GPU_FOLD)
#include "shoal/aggregator/gpu_fold.h"
#endif

namespace shoal {
namespace {

enum class FoldDevice { kAuto, kCpu, kGpu };

// Below this many update bytes, `auto` folds on the CPU: the copies' and launches' fixed cost
// (tens of µs per tensor) exceeds a CPU fold of a small model.
constexpr uint64_t kGpuMinUpdateBytes = uint64_t{4} << 20;

class FlLeafHandler final : public Handler {
 public:
  FlLeafHandler(model::ModelSpec spec, FoldDevice device)
      : spec_(std::move(spec)), device_(device) {}
  ~FlLeafHandler() override {
    if (register_thread_.joinable()) register_thread_.join();
  }
  bool MayBlock() const override { return false; }

  void OnPoolAttached(void* base, size_t bytes) override {
    if (device_ == FoldDevice::kCpu) {
      spdlog::info("fl-leaf: folding on the CPU ({}): spec.aggregation.device is cpu",
                   aggregator::FoldIsa());
      return;
    }
#if defined(SHOAL_HAVE_GPU_FOLD)
    std::string why;
    if (!aggregator::GpuFoldAvailable(&why)) {
      spdlog::log(device_ == FoldDevice::kGpu ? spdlog::level::warn : spdlog::level::info,
                  "fl-leaf: folding on the CPU ({}): {}", aggregator::FoldIsa(), why);
      return;
    }
    auto folder = aggregator::GpuFolder::Create();
    if (!folder.ok()) {
      spdlog::warn("fl-leaf: folding on the CPU: {}", folder.status().ToString());
      return;
    }
    gpu_ = std::move(*folder);
    // Pinning the pool takes about 0.9 s per GiB: done beside the event loop, which folds on
    // the CPU until it is finished.
    register_thread_ = std::thread([this, base, bytes] {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = gpu_->RegisterHost(base, bytes);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!st.ok()) {
        spdlog::warn("fl-leaf: folding on the CPU: cannot pin the pool: {}", st.ToString());
        return;
      }
      spdlog::info(
          "fl-leaf: folding on the GPU (device {}) for updates >= {} bytes{}; pool "
          "pinned ({} MiB in {:.2f} s)",
          gpu_->device(), device_ == FoldDevice::kGpu ? 0 : kGpuMinUpdateBytes,
          device_ == FoldDevice::kGpu ? " (device: gpu)" : " (device: auto)", bytes >> 20, s);
      gpu_ready_.store(true, std::memory_order_release);
    });
#else
    (void)base;
    (void)bytes;
    spdlog::log(device_ == FoldDevice::kGpu ? spdlog::level::warn : spdlog::level::info,
                "fl-leaf: folding on the CPU ({}): this build has no CUDA", aggregator::FoldIsa());
#endif
  }

  Status Handle(const Request& request, ResponseBuilder& response) override {
    auto view = model::ParseUpdate(request.body, spec_, limits_);
    if (!view.ok()) return view.status();
    const uint64_t need = spec_.num_params() * sizeof(float);
    if (request.aux.size() < need) {
      return Internal("no partial-sum buffer for this update (" +
                      std::to_string(request.aux.size()) + " bytes, need " + std::to_string(need) +
                      ")");
    }
    auto* acc = reinterpret_cast<float*>(request.aux.data());
    if (!FoldOnGpu(*view, acc, request.aux_value)) {
      for (const model::TensorView& t : view->tensors) {
        aggregator::Fold(acc + spec_.offset(t.index), t.data,
                         static_cast<aggregator::DType>(t.dtype), t.numel, request.aux_value);
      }
    }
    const std::string json = "{\"accepted\":true,\"client_id\":\"" + view->meta.client_id +
                             "\",\"base_version\":" + std::to_string(view->meta.base_version) +
                             "}\n";
    auto out = response.Allocate(json.size(), "application/json");
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), json.data(), json.size());
    response.SetStatus(202);
    return {};
  }

 private:
  // True when the update was folded on the GPU. On a GPU error the partial sum may be partly
  // written, so the update cannot simply be retried on the CPU: the error ends the GPU path
  // for this instance and fails the process, and the coordinator rebuilds the partial sum
  // from the held updates as it does for any crashed leaf.
  bool FoldOnGpu(const model::UpdateView& view, float* acc, float w) {
#if defined(SHOAL_HAVE_GPU_FOLD)
    if (!gpu_ready_.load(std::memory_order_acquire)) return false;
    uint64_t bytes = 0;
    for (const model::TensorView& t : view.tensors) {
      bytes += t.numel * aggregator::DTypeSize(static_cast<aggregator::DType>(t.dtype));
    }
    if (device_ == FoldDevice::kAuto && bytes < kGpuMinUpdateBytes) return false;
    segments_.clear();
    for (const model::TensorView& t : view.tensors) {
      segments_.push_back({acc + spec_.offset(t.index), t.data,
                           static_cast<aggregator::DType>(t.dtype), t.numel, w});
    }
    Status st = gpu_->FoldHost(segments_);
    if (!st.ok()) {
      spdlog::critical("fl-leaf: GPU fold failed, the partial sum is unknown: {}", st.ToString());
      std::abort();
    }
    return true;
#else
    (void)view;
    (void)acc;
    (void)w;
    return false;
#endif
  }

  model::ModelSpec spec_;
  model::ParseLimits limits_;
  FoldDevice device_;
#if defined(SHOAL_HAVE_GPU_FOLD)
  std::unique_ptr<aggregator::GpuFolder> gpu_;
  std::vector<aggregator::GpuFoldSegment> segments_;
#endif
  std::atomic<bool> gpu_ready_{false};
  std::thread register_thread_;
};

}  // namespace

Result<std::unique_ptr<Handler>> CreateFlLeafHandler() {
  const char* arch = std::getenv("SHOAL_FL_ARCH");
  const char* hidden = std::getenv("SHOAL_FL_HIDDEN");
  const char* device = std::getenv("SHOAL_FL_AGG_DEVICE");  // spec.aggregation.device
  model::ArchitectureOptions opts;
  if (hidden != nullptr && *hidden != '\0') opts.hidden = {std::strtoull(hidden, nullptr, 10)};
  const char* inputs = std::getenv("SHOAL_FL_INPUTS");  // 64 for digits; default 784
  if (inputs != nullptr && *inputs != '\0') opts.inputs = std::strtoull(inputs, nullptr, 10);
  auto spec = model::ArchitectureSpec(arch ? arch : "mlp", opts);
  if (!spec.ok()) return spec.status();
  FoldDevice dev = FoldDevice::kAuto;
  const std::string d = device ? device : "auto";
  if (d == "cpu") {
    dev = FoldDevice::kCpu;
  } else if (d == "gpu") {
    dev = FoldDevice::kGpu;
  } else if (d != "auto" && !d.empty()) {
    return InvalidArgument("SHOAL_FL_AGG_DEVICE: unknown device '" + d + "' (auto, cpu, gpu)");
  }
  return std::unique_ptr<Handler>(new FlLeafHandler(std::move(*spec), dev));
}

}  // namespace shoal

SHOAL_BUILTIN_MODULE(shoal::CreateFlLeafHandler)
