// The FL leaf aggregator: folds each model update it receives, in place in the job's pool,
// into the partial sum the coordinator named for it (Σ c_k x_k), with the vectorised fold
// kernel. The coordinator adds the leaves' partial sums and applies the algorithm's final
// step; nothing here knows which algorithm runs.
#include <cstdlib>
#include <cstring>
#include <string>

#include "shoal/aggregator/fold.h"
#include "shoal/model/architectures.h"
#include "shoal/model/update_format.h"
#include "shoal/runtime/handler.h"

namespace shoal {
namespace {

class FlLeafHandler final : public Handler {
 public:
  explicit FlLeafHandler(model::ModelSpec spec) : spec_(std::move(spec)) {}
  bool MayBlock() const override { return false; }

  Status Handle(const Request& request, ResponseBuilder& response) override {
    auto view = model::ParseUpdate(request.body, spec_, limits_);
    if (!view.ok()) return view.status();
    const uint64_t need = spec_.num_params() * sizeof(float);
    if (request.aux.size() < need) {
      return Internal("no partial-sum buffer for this update (" +
                      std::to_string(request.aux.size()) + " bytes, need " +
                      std::to_string(need) + ")");
    }
    auto* acc = reinterpret_cast<float*>(request.aux.data());
    for (const model::TensorView& t : view->tensors) {
      aggregator::Fold(acc + spec_.offset(t.index), t.data,
                       static_cast<aggregator::DType>(t.dtype), t.numel, request.aux_value);
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
  model::ModelSpec spec_;
  model::ParseLimits limits_;
};

}  // namespace

Result<std::unique_ptr<Handler>> CreateFlLeafHandler() {
  const char* arch = std::getenv("SHOAL_FL_ARCH");
  const char* hidden = std::getenv("SHOAL_FL_HIDDEN");
  model::ArchitectureOptions opts;
  if (hidden != nullptr && *hidden != '\0') opts.hidden = {std::strtoull(hidden, nullptr, 10)};
  const char* inputs = std::getenv("SHOAL_FL_INPUTS");  // 64 for digits; default 784
  if (inputs != nullptr && *inputs != '\0') opts.inputs = std::strtoull(inputs, nullptr, 10);
  auto spec = model::ArchitectureSpec(arch ? arch : "mlp", opts);
  if (!spec.ok()) return spec.status();
  return std::unique_ptr<Handler>(new FlLeafHandler(std::move(*spec)));
}

}  // namespace shoal
