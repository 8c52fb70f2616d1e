#include "shoal/control/autoscaler/scaling_policy.h"

#include <algorithm>

#include "shoal/control/autoscaler/kpa_policy.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/control/autoscaler/rl_q_policy.h"
#include "shoal/control/autoscaler/shoal_policy.h"

namespace shoal {

uint32_t ClampScale(uint64_t replicas, const FunctionSignals& s) {
  uint64_t r = std::max<uint64_t>(replicas, s.min_scale);
  if (s.max_scale > 0) r = std::min<uint64_t>(r, std::max(s.max_scale, s.min_scale));
  return static_cast<uint32_t>(std::min<uint64_t>(r, UINT32_MAX));
}

Result<std::unique_ptr<ScalingPolicy>> MakeScalingPolicy(const std::string& name,
                                                         const PolicyParams& params) {
  if (name == "kpa") return MakeValidated<ScalingPolicy, KpaPolicy>(params.kpa);
  if (name == "rl-q") return MakeValidated<ScalingPolicy, RlQPolicy>(params.rl_q);
  if (name == "shoal") return MakeValidated<ScalingPolicy, ShoalPolicy>(params.shoal);
  if (name == "learned") {
    SHOAL_RETURN_IF_ERROR(Validate(params.shoal));
    SHOAL_RETURN_IF_ERROR(Validate(params.learned));
    std::shared_ptr<const LearnedModel> model = params.learned.model;
    if (!model) model = LearnedModel::Default();
    if (!params.learned.model && !params.learned.policy_file.empty()) {
      auto loaded = LearnedModel::Load(params.learned.policy_file);
      if (!loaded.ok()) return loaded.status();
      model = std::make_shared<const LearnedModel>(std::move(loaded).value());
    }
    return std::unique_ptr<ScalingPolicy>(
        std::make_unique<LearnedPolicy>(params.learned, params.shoal, std::move(model)));
  }
  return InvalidArgument("unknown scaling policy '" + name +
                         "' (known: kpa, rl-q, shoal, learned)");
}

}  // namespace shoal
