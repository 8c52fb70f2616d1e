// DocumentParser: an FLJob's spec.durability {mode, checkpointEvery}: whether an acknowledged
// update is held whole until its version's checkpoint (updates) or made durable through its
// leaf's checkpointed partial sum (partialSums; shoal/fl/coordinator/partial_checkpoint.h).
#include "shoal/control/node/manifest_parser.h"

namespace shoal::manifest_internal {

void DocumentParser::ParseDurability(const YAML::Node& n, FlJobSpec& spec) const {
  const std::string path = "spec.durability";
  ExpectMap(n, path);
  CheckKeys(n, path, {"mode", "checkpointEvery"});
  if (const YAML::Node m = n["mode"]) {
    static constexpr const char* kModes[] = {"updates", "partialSums"};
    spec.durability.mode = OneOf(m, path + ".mode", "durability mode", kModes);
  }
  if (const YAML::Node e = n["checkpointEvery"]) {
    spec.durability.checkpoint_every =
        static_cast<uint32_t>(Integer(e, path + ".checkpointEvery", 1, 1000000));
  }
  if (!spec.durability.partial_sums()) return;
  // These read every update of the round whole at commit (the rule, DP's per-update clipping)
  // or unmask the round's masked inputs as a set: a partial sum cannot stand for them.
  const char* other = spec.robust.enabled()                     ? "spec.aggregation.robust"
                      : spec.privacy.dp.enabled                 ? "spec.privacy.dp"
                      : spec.privacy.secure_aggregation.enabled ? "spec.privacy.secureAggregation"
                                                                : nullptr;
  if (other != nullptr) {
    Fail(path + ".mode",
         std::string("partialSums cannot be combined with ") + other +
             " (it needs the round's whole updates at commit; partialSums drops each update once "
             "it is folded)",
         n["mode"] ? n["mode"] : n);
  }
}

}  // namespace shoal::manifest_internal
