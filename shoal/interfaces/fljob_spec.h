// An FL job as the coordinator sees it: what the `FLJob` manifest says, validated, with the
// defaults filled in (written once, here). Algorithm parameters stay a name->number map here;
// the coordinator checks them against the algorithm (errors name spec.algorithm.params.<p>).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shoal {

// spec.aggregation.robust: a robust rule over a round's individual updates instead of their
// weighted mean (shoal/fl/robust), with norm clipping before it or alone. The coordinator
// checks it against the algorithm and the round size (errors name spec.aggregation.robust.<p>).
struct FlRobustSpec {
  std::string rule = "none";  // none | median | trimmedMean | krum | flag
  double beta = 0.1;          // trimmedMean: the fraction dropped at each end, [0, 0.5)
  uint32_t f = 1;             // krum: byzantine updates tolerated (needs n > 2f + 2)
  uint32_t m = 0;             // krum: updates averaged (0: n - f)
  uint32_t rank = 1;          // flag: the subspace's dimension
  double clip_norm = 0;       // clipNorm: each delta scaled to at most this L2 norm (0: off)
  bool clip_median = false;   // clipNorm: median: to the median of the round's deltas' norms
  bool enabled() const { return rule != "none" || clip_norm > 0 || clip_median; }
};

// spec.privacy.secureAggregation: SecAgg+ (shoal/fl/secagg): clients send masked fixed-point
// inputs, leaves fold them modulo 2^32, the top unmasks the sum once at commit. FedAvg family,
// synchronous rounds only (the coordinator refuses the others, saying why).
struct FlSecureAggregationSpec {
  bool enabled = false;
  uint32_t threshold = 0;       // shares that reconstruct a client's secret; fewest survivors
  uint32_t neighbours = 0;      // the graph's degree (even; SecAgg+'s O(log n))
  double clip_range = 1.0;      // clipRange: values clipped to [-clipRange, clipRange]
  uint32_t bits = 16;           // bits: each value quantized to [0, 2^bits - 1]
  double stage_timeout_s = 30;  // stageTimeout: a stage closes after this without every client
};

// spec.privacy.dp: central differential privacy (shoal/fl/privacy): each update's change from
// the model it was trained from clipped to L2 norm C (fixed, or adapted each round after Andrew
// et al. 2021), Gaussian noise N(0, (noise_multiplier * C)^2) added once to the round's sum, the
// unweighted mean taken, and the (ε, δ) spent accounted per version. The coordinator checks it
// against the algorithm (errors name spec.privacy.dp.<field>).
struct FlDpSpec {
  bool enabled = false;
  double noise_multiplier = 0;      // noiseMultiplier σ (required; 0: clipping only, ε infinite)
  double clip = 0;                  // clip.fixed C, or clip.adaptive.initial
  bool adaptive = false;            // clip.adaptive
  double target_quantile = 0.5;     // clip.adaptive.targetQuantile γ: share of norms <= C
  double clip_learning_rate = 0.2;  // clip.adaptive.learningRate η: C <- C exp(-η (b - γ))
  double count_noise_multiplier = 0;  // clip.adaptive.countNoiseMultiplier σ_b (0: expected/20)
  double delta = 1e-5;                // delta δ of the (ε, δ) reported
  double budget = 0;                  // budget: ε the job may spend (0: no limit)
};

// spec.privacy.
struct FlPrivacySpec {
  FlDpSpec dp;                                 // spec.privacy.dp
  FlSecureAggregationSpec secure_aggregation;  // spec.privacy.secureAggregation
};

// spec.flower: the job runs a Flower app (flwr 1.42): its SuperNodes talk Flower's Fleet API
// to the gateway (shoal/fl/flower) and Shoal plays the ServerApp's part with this job's
// algorithm. Config values keep their YAML type: 'i' integer, 'f' float, 'b' bool, 's' string.
struct FlFlowerValue {
  char kind = 's';
  std::string text;  // the scalar as written ("0.01", "true", "3", "cifar")
};
struct FlFlowerSpec {
  std::string fab;  // absolute path of the app bundle `flwr build` wrote
  std::vector<std::pair<std::string, FlFlowerValue>> run_config;    // Run.override_config
  std::vector<std::pair<std::string, FlFlowerValue>> train_config;  // the train ConfigRecord
  bool evaluate = true;  // an `evaluate` message to every node after each commit
  // SuperNode allow-list (Flower's --enable-supernode-auth): only the listed public keys (and
  // those registered later through the control API) may activate; self-registration is refused.
  // supernodes: the key files' texts as read at deploy (OpenSSH ecdsa lines or PEM).
  bool supernode_auth = false;          // spec.flower.supernodeAuth (default: supernodes given)
  std::vector<std::string> supernodes;  // spec.flower.supernodes
  bool enabled() const { return !fab.empty(); }
};

// spec.model.lora: the job's model is a LoRA adapter of a shoal-gpt base model
// (docs/reference/lm-format.md, shoal/fl/lora): tensors "h.{i}.{target}.lora_A" [rank, in] and
// ".lora_B" [out, rank]; the initial global is LoRA's (A uniform from spec.model.seed, B zero).
// spec.aggregation.lora.method: fedit (FedAvg of A and B, every client at `rank`) or hetlora
// (clients at ranks <= `rank`, zero-padded into it by the leaves' fold).
struct FlLoraSpec {
  std::string base;   // base: absolute path of the shoal-gpt .safetensors
  uint32_t rank = 8;  // rank: the job's (HetLoRA: the largest a client may send)
  double alpha = 16;  // alpha: W_eff = W + (alpha / rank) B A (serving and clients read it here)
  std::vector<std::string> targets = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"};
  std::string method = "fedit";  // spec.aggregation.lora.method: fedit | hetlora
  bool enabled() const { return !base.empty(); }
};

// spec.durability: what an acknowledged update's 202 rests on until its version's checkpoint is
// written. "updates" (the default): the update is held whole in the pool and named by the update
// log, and a restart re-folds it. "partialSums": the update's buffer goes back to the pool once
// its leaf folded it (so a round may add up to many times the pool); each leaf's partial sum is
// checkpointed (fsync'd, renamed) every `checkpoint_every` updates it folded, with the log seqs
// it includes, and a restart loads the partial sums and asks the clients whose acknowledged
// updates no checkpoint includes to send again (shoal/fl/coordinator/partial_checkpoint.h).
struct FlDurabilitySpec {
  std::string mode = "updates";   // spec.durability.mode: updates | partialSums
  uint32_t checkpoint_every = 4;  // spec.durability.checkpointEvery: updates per partial sum
  bool partial_sums() const { return mode == "partialSums"; }
};

struct FlJobSpec {
  std::string name;                  // metadata.name (DNS label)
  std::string tenant = "default";    // metadata.namespace: the job's shared-memory pool
  std::string algorithm = "fedavg";  // fedavg fedavgm fedadam fedasync fedbuff fedfix fedcompass
  std::map<std::string, double> algorithm_params;  // spec.algorithm.params
  std::string architecture = "mlp";                // spec.model.architecture: mlp | cnn | logreg
  uint32_t hidden = 128;                           // spec.model.hidden (mlp, cnn)
  std::string initial_model;  // spec.model.initial: absolute path of a .safetensors
  // spec.model.onnx: absolute path of an ONNX file whose float initializers are the job's
  // tensors (architecture is then "onnx"; shoal/serving/onnxmodel/onnx_model.h).
  std::string onnx_model;
  FlLoraSpec lora;    // spec.model.lora (architecture is then "lora")
  uint64_t seed = 1;  // spec.model.seed: initialisation
  std::string dataset =
      "fashion-mnist";         // spec.data.dataset: what clients train on (informational)
  uint32_t clients = 0;        // spec.clients.expected (required, >= 1)
  uint32_t quorum = 0;         // spec.clients.quorum: sync rounds commit with this many (0 = all)
  uint32_t rounds = 0;         // spec.stop.rounds: stop after this many versions (0 = no limit)
  double target_accuracy = 0;  // spec.stop.accuracy: stop when reported accuracy reaches it
  double round_deadline_s =
      0;  // spec.deadlines.round: sync rounds commit at the deadline with >= quorum
  uint32_t local_steps = 100;     // spec.training.localSteps (FedCompass: Q_max)
  double learning_rate = 0.1;     // spec.training.learningRate (sent to clients in the task)
  uint32_t batch_size = 32;       // spec.training.batchSize
  uint32_t staleness_limit = 20;  // spec.aggregation.maxStaleness: older base versions are refused
  uint32_t max_fan_in = 8;        // spec.aggregation.maxFanIn: updates a leaf folds at once
  uint32_t max_leaves = 4;        // spec.aggregation.maxLeaves
  std::string aggregation_device = "auto";  // spec.aggregation.device: auto | cpu | gpu (leaf fold)
  // spec.aggregation.wireFormats: the update formats the leaves take (f32, bf16, f16, int8,
  // int4; shoal/fl/wire/dtype.h's UpdateDTypeFromName), in the manifest's order.
  std::vector<std::string> wire_formats = {"f32", "bf16", "f16"};
  FlRobustSpec robust;                   // spec.aggregation.robust
  FlPrivacySpec privacy;                 // spec.privacy
  std::vector<std::string> join_tokens;  // spec.clients.tokens: pre-shared; empty = anyone may join
  FlFlowerSpec flower;                   // spec.flower
  FlDurabilitySpec durability;           // spec.durability
  uint64_t generation = 0;
  std::string manifest;  // the YAML as deployed
};

}  // namespace shoal
