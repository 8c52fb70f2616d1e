// FlJobSpec as state.json and the cluster's job record keep it (SpecToJson, SpecFromJson).
#include <nlohmann/json.hpp>

#include "shoal/fl/coordinator/job_state.h"

namespace shoal {

// The spec as state.json and the cluster's job record keep it: every field under its member's
// name (renaming a member renames the stored key), robust's in an object of its own. A missing
// key reads as the default (SpecFromJson).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FlRobustSpec, rule, beta, f, m, rank, clip_norm,
                                                clip_median)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FlDpSpec, enabled, noise_multiplier, clip, adaptive,
                                                target_quantile, clip_learning_rate,
                                                count_noise_multiplier, delta, budget)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FlSecureAggregationSpec, enabled, threshold,
                                                neighbours, clip_range, bits, stage_timeout_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FlLoraSpec, base, rank, alpha, targets, method)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FlDurabilitySpec, mode, checkpoint_every)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    FlJobSpec, name, tenant, algorithm, algorithm_params, architecture, hidden, initial_model,
    onnx_model, seed, dataset, clients, quorum, rounds, target_accuracy, round_deadline_s,
    local_steps, learning_rate, batch_size, staleness_limit, max_fan_in, max_leaves,
    aggregation_device, wire_formats, join_tokens, generation, manifest)

namespace coordinator_internal {
namespace {

// spec.flower: {"fab", "run_config": [[key, kind, text]...], "train_config", "evaluate",
// "supernode_auth", "supernodes": [key text...]}.
Json FlowerToJson(const FlFlowerSpec& f) {
  auto items = [](const auto& list) {
    Json a = Json::array();
    for (const auto& [k, v] : list) a.push_back({k, std::string(1, v.kind), v.text});
    return a;
  };
  return {{"fab", f.fab},
          {"run_config", items(f.run_config)},
          {"train_config", items(f.train_config)},
          {"evaluate", f.evaluate},
          {"supernode_auth", f.supernode_auth},
          {"supernodes", f.supernodes}};
}

FlFlowerSpec FlowerFromJson(const Json& j) {
  FlFlowerSpec f;
  f.fab = j.value("fab", "");
  f.evaluate = j.value("evaluate", true);
  f.supernode_auth = j.value("supernode_auth", false);
  if (j.contains("supernodes") && j["supernodes"].is_array()) {
    for (const auto& k : j["supernodes"]) {
      if (k.is_string()) f.supernodes.push_back(k.get<std::string>());
    }
  }
  auto items = [&](const char* key, auto& out) {
    if (!j.contains(key) || !j[key].is_array()) return;
    for (const auto& e : j[key]) {
      if (!e.is_array() || e.size() != 3) continue;
      const std::string kind = e[1].get<std::string>();
      out.emplace_back(e[0].get<std::string>(),
                       FlFlowerValue{kind.empty() ? 's' : kind[0], e[2].get<std::string>()});
    }
  };
  items("run_config", f.run_config);
  items("train_config", f.train_config);
  return f;
}

}  // namespace

Json SpecToJson(const FlJobSpec& s) {
  Json j = s;
  j["robust"] = s.robust;
  if (s.privacy.dp.enabled) j["privacy"]["dp"] = s.privacy.dp;
  if (s.flower.enabled()) j["flower"] = FlowerToJson(s.flower);
  if (s.lora.enabled()) j["lora"] = s.lora;
  if (s.durability.partial_sums()) j["durability"] = s.durability;
  if (s.privacy.secure_aggregation.enabled) {
    j["privacy"]["secureAggregation"] = s.privacy.secure_aggregation;
  }
  return j;
}

// A field the JSON lacks keeps FlJobSpec's default, but for two: a record without clients or
// generation reads as one client and a first deployment (the registry counts from 1). A robust
// that is not an object is ignored.
FlJobSpec SpecFromJson(const Json& j) {
  FlJobSpec s = j.get<FlJobSpec>();
  if (!j.contains("clients")) s.clients = 1;
  if (!j.contains("generation")) s.generation = 1;
  if (j.contains("robust") && j["robust"].is_object()) s.robust = j["robust"].get<FlRobustSpec>();
  if (j.contains("privacy") && j["privacy"].is_object() && j["privacy"].contains("dp") &&
      j["privacy"]["dp"].is_object()) {
    s.privacy.dp = j["privacy"]["dp"].get<FlDpSpec>();
  }
  if (j.contains("flower") && j["flower"].is_object()) s.flower = FlowerFromJson(j["flower"]);
  if (j.contains("lora") && j["lora"].is_object()) s.lora = j["lora"].get<FlLoraSpec>();
  if (j.contains("durability") && j["durability"].is_object()) {
    s.durability = j["durability"].get<FlDurabilitySpec>();
  }
  if (j.contains("privacy") && j["privacy"].is_object() &&
      j["privacy"].contains("secureAggregation") && j["privacy"]["secureAggregation"].is_object()) {
    s.privacy.secure_aggregation = j["privacy"]["secureAggregation"].get<FlSecureAggregationSpec>();
  }
  return s;
}

}  // namespace coordinator_internal
}  // namespace shoal
