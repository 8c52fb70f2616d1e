// DocumentParser: an FLJob's spec.privacy.dp (central differential privacy; shoal/fl/privacy).
#include <string>

#include "shoal/control/node/manifest_parser.h"
#include "shoal/fl/privacy/dp_spec_check.h"

namespace shoal::manifest_internal {

// spec.privacy.dp: {noiseMultiplier, clip: {fixed: C} | {adaptive: {initial, targetQuantile,
// learningRate, countNoiseMultiplier}}, delta, budget}; each field's range here (reported at its
// line), then the combinations the coordinator also checks at deploy (privacy::CheckDpSpec).
void DocumentParser::ParseDp(const YAML::Node& n, FlJobSpec& spec) {
  const std::string path = "spec.privacy.dp";
  ExpectMap(n, path);
  CheckKeys(n, path, {"noiseMultiplier", "clip", "delta", "budget"});
  FlDpSpec& d = spec.privacy.dp;
  d.enabled = true;
  const YAML::Node sigma = n["noiseMultiplier"];
  if (!sigma || sigma.IsNull()) {
    Fail(path + ".noiseMultiplier", "required (σ: the noise's standard deviation over the clip)",
         n);
  }
  d.noise_multiplier = Number(sigma, path + ".noiseMultiplier");
  if (!(d.noise_multiplier >= 0)) {
    Fail(path + ".noiseMultiplier", "must be >= 0, got " + sigma.Scalar(), sigma);
  }
  const YAML::Node clip = n["clip"];
  if (!clip || clip.IsNull()) Fail(path + ".clip", "required ({fixed: C} or {adaptive: {...}})", n);
  ExpectMap(clip, path + ".clip");
  CheckKeys(clip, path + ".clip", {"fixed", "adaptive"});
  if (clip["fixed"] && clip["adaptive"]) {
    Fail(path + ".clip", "one of fixed or adaptive, not both", clip);
  }
  auto positive = [&](const YAML::Node& v, const std::string& p) {
    const double x = Number(v, p);
    if (!(x > 0)) Fail(p, "must be > 0, got " + v.Scalar(), v);
    return x;
  };
  if (const YAML::Node f = clip["fixed"]) {
    d.clip = positive(f, path + ".clip.fixed");
  } else if (const YAML::Node a = clip["adaptive"]) {
    const std::string ap = path + ".clip.adaptive";
    ExpectMap(a, ap);
    CheckKeys(a, ap, {"initial", "targetQuantile", "learningRate", "countNoiseMultiplier"});
    d.adaptive = true;
    d.clip = positive(Required(a, "initial", ap), ap + ".initial");
    if (const YAML::Node g = a["targetQuantile"]) {
      d.target_quantile = Number(g, ap + ".targetQuantile");
      if (!(d.target_quantile >= 0 && d.target_quantile <= 1)) {
        Fail(ap + ".targetQuantile", "must be between 0 and 1, got " + g.Scalar(), g);
      }
    }
    if (const YAML::Node lr = a["learningRate"]) {
      d.clip_learning_rate = positive(lr, ap + ".learningRate");
    }
    if (const YAML::Node sb = a["countNoiseMultiplier"]) {
      d.count_noise_multiplier = positive(sb, ap + ".countNoiseMultiplier");
    }
  } else {
    Fail(path + ".clip", "one of fixed or adaptive", clip);
  }
  if (const YAML::Node delta = n["delta"]) {
    d.delta = Number(delta, path + ".delta");
    if (!(d.delta > 0 && d.delta < 1)) {
      Fail(path + ".delta", "must be > 0 and < 1, got " + delta.Scalar(), delta);
    }
  }
  if (const YAML::Node b = n["budget"]) d.budget = positive(b, path + ".budget");
  static constexpr const char* kSynchronous[] = {"fedavg", "fedavgm", "fedadam"};
  bool sync = false;
  for (const char* a : kSynchronous) sync = sync || spec.algorithm == a;
  if (Status st = privacy::CheckDpSpec(spec, sync); !st.ok()) Fail("", st.message(), n);
}

}  // namespace shoal::manifest_internal
