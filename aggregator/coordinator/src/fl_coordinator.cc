#include "shoal/aggregator/fl_coordinator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "shoal/aggregator/algorithms.h"
#include "shoal/aggregator/compass_scheduler.h"
#include "shoal/aggregator/fold.h"
#include "shoal/aggregator/fold_pool.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/model/architectures.h"
#include "shoal/model/safetensors.h"
#include "shoal/model/update_format.h"
#include "shoal/v1/fl.pb.h"
#include "robust_commit.h"

namespace shoal {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace agg = aggregator;

namespace {

constexpr size_t kKeptModels = 4;  // safetensors of the last versions kept for download
constexpr size_t kSpareModels = 2;  // blobs of versions no longer kept, reused by the next ones

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string RandomToken() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 32; ++i) t += hex[rd() & 15];
  return t;
}

double Param(const FlJobSpec& s, const char* name, double def) {
  auto it = s.algorithm_params.find(name);
  return it == s.algorithm_params.end() ? def : it->second;
}

// The manifest's spec.algorithm.params (names as users write them) mapped onto the library's
// parameter structs; every default is the library's (written once, in algorithms.h).
const std::map<std::string, std::vector<std::string>>& KnownParams() {
  static const std::map<std::string, std::vector<std::string>> kParams = {
      {"fedavg", {}},
      {"fedavgm", {"beta", "eta"}},
      {"fedadam", {"eta", "beta1", "beta2", "tau"}},
      {"fedasync", {"alpha", "a"}},
      {"fedbuff", {"k", "eta", "a"}},
      {"fedfix", {"period", "total_samples"}},
      {"fedcompass", {"alpha", "a", "q_min", "lambda", "momentum"}},
  };
  return kParams;
}

agg::AlgorithmParams LibraryParams(const FlJobSpec& s) {
  agg::AlgorithmParams p;
  p.fedavgm.beta = Param(s, "beta", p.fedavgm.beta);
  p.fedavgm.eta = Param(s, "eta", p.fedavgm.eta);
  p.fedadam.eta = Param(s, "eta", p.fedadam.eta);
  p.fedadam.beta1 = Param(s, "beta1", p.fedadam.beta1);
  p.fedadam.beta2 = Param(s, "beta2", p.fedadam.beta2);
  p.fedadam.tau = Param(s, "tau", p.fedadam.tau);
  p.fedasync.alpha = Param(s, "alpha", p.fedasync.alpha);
  p.fedasync.staleness_exponent = Param(s, "a", p.fedasync.staleness_exponent);
  p.fedbuff.buffer_size = static_cast<uint32_t>(Param(s, "k", p.fedbuff.buffer_size));
  p.fedbuff.eta_g = Param(s, "eta", p.fedbuff.eta_g);
  p.fedbuff.staleness_exponent = Param(s, "a", p.fedbuff.staleness_exponent);
  p.fedfix.period_s = Param(s, "period", p.fedfix.period_s);
  p.fedfix.total_samples = Param(s, "total_samples", p.fedfix.total_samples);
  p.fedcompass.alpha = Param(s, "alpha", p.fedcompass.alpha);
  p.fedcompass.staleness_exponent = Param(s, "a", p.fedcompass.staleness_exponent);
  p.fedcompass.num_clients = s.clients;
  p.fedcompass.q_max = s.local_steps;
  p.fedcompass.q_min = static_cast<uint32_t>(Param(s, "q_min", p.fedcompass.q_min));
  p.fedcompass.latest_time_factor = Param(s, "lambda", p.fedcompass.latest_time_factor);
  p.fedcompass.speed_momentum = Param(s, "momentum", p.fedcompass.speed_momentum);
  return p;
}

Result<std::unique_ptr<agg::AggregationAlgorithm>> MakeJobAlgorithm(const FlJobSpec& s) {
  auto known = KnownParams().find(s.algorithm);
  if (known == KnownParams().end()) {
    return InvalidArgument("spec.algorithm.name: '" + s.algorithm +
                           "' is not an algorithm (fedavg, fedavgm, fedadam, fedasync, fedbuff, "
                           "fedfix, fedcompass)");
  }
  for (const auto& [k, v] : s.algorithm_params) {
    if (std::find(known->second.begin(), known->second.end(), k) == known->second.end()) {
      return InvalidArgument("spec.algorithm.params." + k + ": not a parameter of " + s.algorithm);
    }
    if (!std::isfinite(v) || v < 0) {
      return InvalidArgument("spec.algorithm.params." + k + ": must be a finite number >= 0");
    }
  }
  if (s.clients == 0) return InvalidArgument("spec.clients.expected: must be >= 1");
  if (s.algorithm == "fedcompass" && Param(s, "q_min", 20) > s.local_steps) {
    return InvalidArgument("spec.algorithm.params.q_min: must be <= spec.training.localSteps (Q_max)");
  }
  auto algo = agg::MakeAlgorithm(s.algorithm, LibraryParams(s));
  if (!algo.ok()) return InvalidArgument("spec.algorithm.params: " + algo.status().message());
  return algo;
}

// The model's shape: spec.model's architecture and width; the input width follows the dataset
// the clients train on (sklearn's digits are 8x8, Fashion-MNIST 28x28).
model::ArchitectureOptions JobArchitecture(const FlJobSpec& s) {
  model::ArchitectureOptions o;
  o.hidden = {s.hidden};
  o.inputs = s.dataset == "digits" ? 64 : 784;
  return o;
}

// "c17" -> 17: the scheduler's client ids.
agg::ClientId NumericId(const std::string& id) {
  return id.size() > 1 ? std::strtoull(id.c_str() + 1, nullptr, 10) : 0;
}

// One admitted-and-acknowledged update, as the job's update log keeps it: enough to find its
// bytes in the pool again and to count it exactly once after a restart.
struct LogRecord {
  static constexpr uint32_t kMagic = 0x4c554853;  // "SHUL"
  uint32_t magic = kMagic;
  uint32_t reserved = 0;
  uint64_t seq = 0;
  uint64_t round = 0;
  uint64_t buffer = 0;        // pool offset of the update (held with kCoordinatorSlot)
  uint64_t base_version = 0;
  uint64_t num_samples = 0;
  double coefficient = 0;
  char client[40] = {};
};
static_assert(sizeof(LogRecord) == 96);

Json SpecToJson(const FlJobSpec& s) {
  return Json{{"name", s.name},
              {"tenant", s.tenant},
              {"algorithm", s.algorithm},
              {"algorithm_params", s.algorithm_params},
              {"architecture", s.architecture},
              {"hidden", s.hidden},
              {"initial_model", s.initial_model},
              {"seed", s.seed},
              {"dataset", s.dataset},
              {"clients", s.clients},
              {"quorum", s.quorum},
              {"rounds", s.rounds},
              {"target_accuracy", s.target_accuracy},
              {"round_deadline_s", s.round_deadline_s},
              {"local_steps", s.local_steps},
              {"learning_rate", s.learning_rate},
              {"batch_size", s.batch_size},
              {"staleness_limit", s.staleness_limit},
              {"max_fan_in", s.max_fan_in},
              {"max_leaves", s.max_leaves},
              {"robust",
               {{"rule", s.robust.rule},
                {"beta", s.robust.beta},
                {"f", s.robust.f},
                {"m", s.robust.m},
                {"rank", s.robust.rank},
                {"clip_norm", s.robust.clip_norm},
                {"clip_median", s.robust.clip_median}}},
              {"join_tokens", s.join_tokens},
              {"generation", s.generation},
              {"manifest", s.manifest}};
}

FlJobSpec SpecFromJson(const Json& j) {
  FlJobSpec s;
  s.name = j.value("name", "");
  s.tenant = j.value("tenant", "default");
  s.algorithm = j.value("algorithm", "fedavg");
  s.algorithm_params = j.value("algorithm_params", std::map<std::string, double>{});
  s.architecture = j.value("architecture", "mlp");
  s.hidden = j.value("hidden", 128u);
  s.initial_model = j.value("initial_model", "");
  s.seed = j.value("seed", uint64_t{1});
  s.dataset = j.value("dataset", "fashion-mnist");
  s.clients = j.value("clients", 1u);
  s.quorum = j.value("quorum", 0u);
  s.rounds = j.value("rounds", 0u);
  s.target_accuracy = j.value("target_accuracy", 0.0);
  s.round_deadline_s = j.value("round_deadline_s", 0.0);
  s.local_steps = j.value("local_steps", 100u);
  s.learning_rate = j.value("learning_rate", 0.1);
  s.batch_size = j.value("batch_size", 32u);
  s.staleness_limit = j.value("staleness_limit", 20u);
  s.max_fan_in = j.value("max_fan_in", 8u);
  s.max_leaves = j.value("max_leaves", 4u);
  if (j.contains("robust") && j["robust"].is_object()) {
    const Json& r = j["robust"];
    s.robust.rule = r.value("rule", std::string("none"));
    s.robust.beta = r.value("beta", s.robust.beta);
    s.robust.f = r.value("f", s.robust.f);
    s.robust.m = r.value("m", s.robust.m);
    s.robust.rank = r.value("rank", s.robust.rank);
    s.robust.clip_norm = r.value("clip_norm", 0.0);
    s.robust.clip_median = r.value("clip_median", false);
  }
  s.join_tokens = j.value("join_tokens", std::vector<std::string>{});
  s.generation = j.value("generation", uint64_t{1});
  s.manifest = j.value("manifest", "");
  return s;
}


}  // namespace

struct FlCoordinator::JobState : std::enable_shared_from_this<FlCoordinator::JobState> {
  struct Client {
    std::string id, name, token;
    uint64_t submitted_round = UINT64_MAX;  // sync: the round it already sent an update to
    uint64_t updates = 0;
    uint64_t samples = 0;  // n_k of its latest update (FedFix's data share)
    uint32_t last_update_steps = 0;  // local steps its latest update says it trained
    // Its latest accepted update's base version, and how stale its accepted updates were on
    // arrival (the version then minus their base): the status shows how far clients lag.
    std::optional<uint64_t> last_base_version;
    uint64_t last_staleness = 0;
    uint64_t max_staleness = 0;
    // spec.aggregation.robust: its updates the rule excluded or down-weighted (suspects) and
    // clipNorm scaled down, and what the rule made of its latest one.
    uint64_t suspect_updates = 0;
    uint64_t clipped_updates = 0;
    std::optional<RobustVerdict> last_verdict;
    uint64_t last_verdict_version = 0;
  };
  struct Ticket {
    uint64_t round = 0;
    std::string client;
    uint64_t buffer = 0;  // the update, held with kCoordinatorSlot until its version commits
    uint64_t base_version = 0;
    uint64_t staleness = 0;  // the current version minus base_version when it was admitted
    uint64_t num_samples = 0;
    double coefficient = 0;
    uint32_t instance = 0;
    uint64_t partial = 0;  // the key of the partial sum it is folded into (Round::partials)
    bool acked = false;
    uint64_t seq = 0;  // its record in the update log, once acknowledged
  };
  struct Partial {
    uint64_t offset = 0;            // float32[num_params] in the pool, held by shoald
    std::vector<uint64_t> tickets;  // acked updates folded into it
    uint64_t base = 0;              // their base version (staleness taken at commit)
    // A fold into it failed halfway (its leaf died, or the leaf's GPU fold failed): rebuilt
    // from `tickets` at commit, when no leaf can be writing it any more.
    bool rebuild = false;
  };
  struct Round {
    // By PartialKey: the leaf instance (kRefoldedPartial: refolded by the coordinator), and the
    // base version where the staleness is taken at commit.
    std::map<uint64_t, Partial> partials;
    uint32_t admitted = 0, acked = 0, inflight = 0;
    bool closed = false;
    // FedCompass: what the scheduler hands out once this round is committed, and the general
    // buffer's round committed together with this group's.
    std::vector<agg::CompassAssignment> assignments;
    uint64_t merge_round = 0;
    bool merged = false;  // this round is committed as part of another
  };
  // A FedCompass client's next task: set from the scheduler's assignment once the model it
  // trains from exists.
  struct CompassTask {
    uint32_t steps = 0;
    uint64_t version = 0;
    bool ready = false;
    bool started = false;  // it fetched its first task
  };
  struct VersionInfo {
    uint64_t version = 0;
    std::optional<double> accuracy, loss;
    uint32_t updates = 0;
    double elapsed_s = 0;
  };

  std::mutex mu;
  FlJobSpec spec;
  model::ModelSpec mspec;
  std::unique_ptr<agg::AggregationAlgorithm> algo;
  agg::ModelState state;  // weights, version, server optimizer state
  std::unique_ptr<agg::VersionStore> store;  // w_τ for Δ-based algorithms
  agg::PartialSum total;                     // the top of the tree, reused commit to commit
  std::unique_ptr<agg::FedCompassScheduler> scheduler;
  std::map<std::string, CompassTask> compass_tasks;
  std::map<agg::GroupId, uint64_t> group_round;
  uint64_t general_round = 0;
  // Safetensors of the recent versions, shared with the downloads and the checkpoint writer
  // that still send or write them; the blobs of versions no longer kept are reused (their
  // pages warm) once nobody holds them.
  std::map<uint64_t, std::shared_ptr<std::string>> models;
  std::vector<std::shared_ptr<std::string>> spare_models;
  // Committed versions whose checkpoint is not written yet: their updates' buffers stay held
  // (kCoordinatorSlot) and their log records stay in the update log until it is.
  struct Undurable {
    uint64_t version = 0;
    std::vector<uint64_t> buffers;
    std::vector<LogRecord> records;
  };
  std::deque<Undurable> undurable;
  // Partial-sum buffers already zeroed (their pages touched) by the commit thread, held with
  // kShoaldSlot: a leaf's first update of a round takes one instead of zeroing 4 bytes per
  // parameter on the gateway's loop. Up to WarmPartialsWanted().
  std::vector<uint64_t> warm_partials;
  size_t WarmPartialsWanted() const {
    return done || Robust() ? 0 : std::min<size_t>(spec.max_leaves, 2);
  }
  // spec.aggregation.robust: the rule runs at commit over the round's updates (robust_commit.h);
  // the leaves fold nothing and the rounds have no partial-sum buffers (Partial::offset 0).
  bool Robust() const { return spec.robust.enabled(); }
  std::vector<float> robust_out;  // the rule's result, reused commit to commit
  Json robust_last;               // the last robust commit, for the status
  std::map<std::string, Client> clients;
  uint32_t next_client = 0;
  std::map<uint64_t, Round> rounds;
  uint64_t open_round = 1;
  double round_deadline = 0;  // sync with spec.deadlines.round: when the open round is due
  std::map<uint64_t, Ticket> tickets;
  BufferPool* pool = nullptr;
  std::vector<VersionInfo> versions;
  uint64_t updates_total = 0;
  uint64_t gpu_fallbacks = 0;  // leaves whose GPU fold failed (they fold on the CPU since)
  Clock::time_point start = Clock::now();
  double elapsed_before = 0;  // from the checkpoint this run resumed
  bool done = false;
  bool deleted = false;
  double best_accuracy = 0;
  uint32_t leaf_id = 0;
  // The update log: one LogRecord per acknowledged update, appended before the 202.
  int log_fd = -1;
  std::string dir;
  uint64_t next_seq = 1;
  std::vector<LogRecord> recovered;        // read by Restore, re-folded by Recover

  ~JobState() {
    if (log_fd >= 0) close(log_fd);
  }

  bool Compass() const { return scheduler != nullptr; }
  uint64_t PartialKey(uint32_t instance, uint64_t base) const {
    return algo->staleness_at_commit() ? (base << 32) | instance : instance;
  }
  bool Sync() const { return algo->synchronous(); }
  uint64_t version() const { return state.version; }
  uint64_t NewRound() { return open_round++; }
  double Elapsed() const { return elapsed_before + Seconds(start); }
  // Synchronous rounds: how many admitted updates close a round. With a deadline the round
  // waits for every expected client and the deadline settles for a quorum (Timers).
  uint32_t Needed() const {
    if (spec.round_deadline_s > 0) return spec.clients;
    return spec.quorum > 0 ? spec.quorum : spec.clients;
  }
  double TotalSamples() const {
    double n = 0;
    for (const auto& [id, c] : clients) n += static_cast<double>(c.samples);
    // Clients that have not reported yet count as the mean of those that have.
    size_t seen = 0;
    for (const auto& [id, c] : clients) seen += c.samples > 0 ? 1 : 0;
    if (seen == 0) return 0;
    return n / static_cast<double>(seen) * std::max<double>(spec.clients, static_cast<double>(seen));
  }
  // The committed model as safetensors (f32, the same bytes ModelToSafetensors writes), taken
  // straight from the weights: models are large, every copy shows in the commit's latency.
  void CacheModel() {
    std::vector<model::SafetensorsEntry> entries;
    for (size_t i = 0; i < mspec.size(); ++i) {
      const model::TensorSpec& t = mspec.tensor(i);
      entries.push_back({t.name, model::DType::kF32, t.shape,
                         std::as_bytes(std::span<const float>(
                             state.weights.data() + mspec.offset(i), t.numel()))});
    }
    std::shared_ptr<std::string> blob;
    for (auto it = spare_models.begin(); it != spare_models.end(); ++it) {
      if (it->use_count() == 1) {  // no download and no checkpoint holds it any more
        blob = std::move(*it);
        spare_models.erase(it);
        break;
      }
    }
    if (!blob) blob = std::make_shared<std::string>();
    if (Status st = model::WriteSafetensorsInto(
            entries,
            {{std::string(model::kMetadataJob), spec.name},
             {std::string(model::kMetadataVersion), std::to_string(state.version)},
             {"format", "pt"}},
            blob.get());
        !st.ok()) {
      spdlog::error("fl job {}: model bytes: {}", spec.name, st.ToString());
      return;
    }
    models[state.version] = std::move(blob);
    while (models.size() > kKeptModels) {
      spare_models.push_back(std::move(models.begin()->second));
      models.erase(models.begin());
    }
    while (spare_models.size() > kSpareModels) spare_models.erase(spare_models.begin());
  }
  void KeepVersion() {
    if (store) (void)store->Put(state.version, state.weights);
  }
  void SetTask(const agg::CompassAssignment& a) {
    CompassTask& t = compass_tasks[fmt::format("c{}", a.client)];
    t.steps = a.local_steps;
    t.version = state.version;
    t.ready = true;
    t.started = true;
  }
  uint64_t GroupRound(agg::GroupId g) {
    auto [it, inserted] = group_round.try_emplace(g, 0);
    if (inserted) it->second = NewRound();
    return it->second;
  }
  // FedCompass: the scheduler aggregates a group (its last member arrived, or its T_l passed):
  // its round closes with the general buffer merged in.
  void CloseGroup(const agg::CompassDecision& d) {
    const uint64_t rid = GroupRound(d.group);
    group_round.erase(d.group);
    Round& r = rounds[rid];
    r.closed = true;
    r.assignments = d.assignments;
    if (general_round != 0) {
      r.merge_round = general_round;
      rounds[general_round].closed = true;
      rounds[general_round].merged = true;
      general_round = 0;
    }
  }
  Status OpenLog() {
    if (log_fd >= 0) close(log_fd);
    log_fd = open((dir + "/updates.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    return log_fd < 0 ? ErrnoStatus("opening " + dir + "/updates.log", errno) : Status::Ok();
  }
  // Written before the client's 202: a write() that returned is in the page cache and survives
  // the process (kill -9); a power cut is a different failure (no fsync on the hot path).
  static LogRecord RecordOf(const Ticket& t) {
    LogRecord r;
    r.seq = t.seq;
    r.round = t.round;
    r.buffer = t.buffer;
    r.base_version = t.base_version;
    r.num_samples = t.num_samples;
    r.coefficient = t.coefficient;
    std::strncpy(r.client, t.client.c_str(), sizeof r.client - 1);
    return r;
  }
  Status AppendLog(const Ticket& t) {
    const LogRecord r = RecordOf(t);
    const ssize_t n = write(log_fd, &r, sizeof r);
    if (n != static_cast<ssize_t>(sizeof r)) return ErrnoStatus("appending to the update log", errno);
    return Status::Ok();
  }
  // The checkpoint of `version` is written: the updates it (and every older version) includes
  // go back to the pool, and the log keeps only the acknowledged updates that no written
  // checkpoint includes yet (those of later, still unwritten versions, and those in flight).
  void Durable(uint64_t version) {
    bool released = false;
    while (!undurable.empty() && undurable.front().version <= version) {
      for (uint64_t b : undurable.front().buffers) (void)pool->Release(b, kCoordinatorSlot);
      undurable.pop_front();
      released = true;
    }
    if (released) CompactLog();
  }
  // The seqs of the log records that the version in memory includes but no written
  // checkpoint does (state.json's last_commit_seqs: a restart skips them).
  std::vector<uint64_t> UndurableSeqs() const {
    std::vector<uint64_t> seqs;
    for (const Undurable& u : undurable) {
      for (const LogRecord& r : u.records) seqs.push_back(r.seq);
    }
    return seqs;
  }
  void CompactLog() {
    std::string bytes;
    for (const Undurable& u : undurable) {
      bytes.append(reinterpret_cast<const char*>(u.records.data()),
                   u.records.size() * sizeof(LogRecord));
    }
    for (const auto& [id, t] : tickets) {
      if (!t.acked) continue;
      const LogRecord r = RecordOf(t);
      bytes.append(reinterpret_cast<const char*>(&r), sizeof r);
    }
    if (Status st = WriteFileAtomic(dir + "/updates.log", bytes.data(), bytes.size()); !st.ok()) {
      spdlog::error("fl job {}: update log: {}", spec.name, st.ToString());
      return;
    }
    (void)OpenLog();
  }
  // Folds the acknowledged updates of `ids` (still in the pool) into the float32 sum at `acc`.
  size_t Refold(float* acc, const std::vector<uint64_t>& ids) {
    size_t n = 0;
    for (uint64_t tid : ids) {
      const Ticket& t = tickets[tid];
      PayloadView pv = ReadPayload(pool->Data(t.buffer));
      auto view = model::ParseUpdate(pv.body, mspec);
      if (!view.ok()) {
        spdlog::error("fl job {}: update {} of client {} no longer parses: {}", spec.name, t.seq,
                      t.client, view.status().ToString());
        continue;
      }
      for (const auto& tv : view->tensors) {
        agg::Fold(acc + mspec.offset(tv.index), tv.data, static_cast<agg::DType>(tv.dtype),
                  tv.numel, static_cast<float>(t.coefficient));
      }
      ++n;
    }
    return n;
  }
  // spec.aggregation.robust: the rule over the round's acknowledged updates, in place in the
  // pool, into `total` as if every update were the rule's result (Σ c_k of them times it), so
  // the algorithm's step is the same; what the rule made of each update is kept per client and
  // each suspect is added to `suspects` (client id, rule).
  Status RobustTotal(const Round& round, RobustCommitter& committer,
                     std::vector<std::pair<std::string, std::string>>* suspects) {
    std::vector<uint64_t> ids;
    for (const auto& [key, p] : round.partials) ids.insert(ids.end(), p.tickets.begin(), p.tickets.end());
    std::vector<std::span<const std::byte>> bodies;
    double c = 0;
    for (uint64_t tid : ids) {
      bodies.push_back(ReadPayload(pool->Data(tickets[tid].buffer)).body);
      c += tickets[tid].coefficient;
    }
    robust_out.resize(mspec.num_params());
    auto outcome = committer.Aggregate(spec.robust, mspec, state.weights.data(), bodies,
                                       robust_out.data());
    if (!outcome.ok()) return outcome.status();
    total.Reset();
    SHOAL_RETURN_IF_ERROR(total.Fold(robust_out, c, version()));
    Json list = Json::array();
    for (size_t i = 0; i < ids.size(); ++i) {
      const Ticket& t = tickets[ids[i]];
      const RobustVerdict& v = outcome->updates[i];
      Client& cl = clients[t.client];
      cl.last_verdict = v;
      cl.last_verdict_version = version() + 1;
      cl.suspect_updates += v.suspect ? 1 : 0;
      cl.clipped_updates += v.clipped ? 1 : 0;
      if (v.suspect) suspects->emplace_back(t.client, outcome->rule);
      Json e = VerdictJson(v);
      e["client"] = t.client;
      e["name"] = cl.name;
      list.push_back(std::move(e));
    }
    robust_last = {{"version", version() + 1},
                   {"rule", outcome->rule},
                   {"fallback", outcome->fallback.empty() ? Json(nullptr) : Json(outcome->fallback)},
                   {"updates", std::move(list)},
                   {"ms", outcome->ms}};
    if (outcome->rule == "flag") robust_last["flag_iterations"] = outcome->flag_iterations;
    if (!outcome->fallback.empty()) spdlog::warn("fl job {}: {}", spec.name, outcome->fallback);
    return {};
  }
  static Json VerdictJson(const RobustVerdict& v) {
    return {{"weight", v.weight},
            {"clip_scale", v.clip_scale},
            {"krum_score", v.krum_score ? Json(*v.krum_score) : Json(nullptr)},
            {"suspect", v.suspect}};
  }
};

namespace {

// Off the commit's critical path (the job's lock is not held while the pages are touched): a
// warm blob for the next version's model bytes, so that CacheModel neither allocates nor
// faults in 11 k fresh pages per ResNet-sized commit.
void PrepareSpareModel(FlCoordinator::JobState& job) {
  size_t bytes;
  {
    std::lock_guard jl(job.mu);
    if (job.deleted || !job.spare_models.empty() || job.models.empty()) return;
    bytes = job.models.rbegin()->second->size();
  }
  auto blob = std::make_shared<std::string>();
  blob->resize(bytes + 64);  // zero-filled: every page touched (the next header may be longer)
  blob->resize(bytes);       // the capacity stays
  std::lock_guard jl(job.mu);
  if (job.spare_models.empty()) job.spare_models.push_back(std::move(blob));
}

// Also behind the commits: zeroes `reuse` (partial sums of committed rounds, held with
// kShoaldSlot) and, up to the job's want, newly allocated ones, without the job's lock, then
// offers them to PartialFor.
void PrepareWarmPartials(FlCoordinator::JobState& job, std::vector<uint64_t> reuse) {
  size_t bytes;
  BufferPool* pool;
  {
    std::lock_guard jl(job.mu);
    pool = job.pool;
    if (pool == nullptr) return;
    bytes = job.mspec.num_params() * sizeof(float);
    if (job.deleted) {
      for (uint64_t off : reuse) (void)pool->Release(off, kShoaldSlot);
      return;
    }
    while (job.warm_partials.size() > job.WarmPartialsWanted()) {  // a job that is done
      (void)pool->Release(job.warm_partials.back(), kShoaldSlot);
      job.warm_partials.pop_back();
    }
    while (job.warm_partials.size() + reuse.size() < job.WarmPartialsWanted()) {
      auto off = pool->Allocate(bytes, kShoaldSlot);
      if (!off.ok()) break;  // a full pool: PartialFor allocates when it must
      reuse.push_back(*off);
    }
  }
  if (reuse.empty()) return;
  for (uint64_t off : reuse) std::memset(pool->Data(off).data(), 0, bytes);
  std::lock_guard jl(job.mu);
  for (uint64_t off : reuse) {
    if (job.deleted || job.warm_partials.size() >= job.WarmPartialsWanted()) {
      (void)pool->Release(off, kShoaldSlot);
    } else {
      job.warm_partials.push_back(off);
    }
  }
}

}  // namespace

FlCoordinator::FlCoordinator(const NodeConfig& config)
    : config_(config),
      writer_(std::make_unique<CheckpointWriter>(
          std::chrono::milliseconds(config.fl_checkpoint_delay_ms))),
      merge_pool_(std::make_unique<agg::FoldPool>()),
      robust_(std::make_unique<RobustCommitter>()) {
  if (config.fl_checkpoint_delay_ms > 0) {
    spdlog::warn("fl: checkpoints are written {} ms behind their commits "
                 "(fl_checkpoint_delay_ms, for tests)",
                 config.fl_checkpoint_delay_ms);
  }
  committer_ = std::thread([this] { CommitLoop(); });
}

FlCoordinator::~FlCoordinator() {
  {
    std::lock_guard lock(commit_mu_);
    stopping_ = true;
  }
  commit_cv_.notify_all();
  committer_.join();
  writer_.reset();  // writes what is queued while the jobs' pools are still there
}

std::shared_ptr<FlCoordinator::JobState> FlCoordinator::Find(const std::string& job) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() || it->second->deleted ? nullptr : it->second;
}

std::string FlCoordinator::LeafFunction(std::string_view job) {
  return "fl." + std::string(job);
}

std::vector<FunctionSpec> FlCoordinator::LeafSpecs() {
  std::lock_guard lock(mu_);
  std::vector<FunctionSpec> out;
  for (const auto& [name, job] : jobs_) {
    if (job->deleted) continue;
    FunctionSpec f;
    f.id = job->leaf_id;
    f.name = LeafFunction(name);
    f.tenant = job->spec.tenant;
    f.handler.builtin = "fl-leaf";
    f.handler.env["SHOAL_FL_ARCH"] = job->spec.architecture;
    f.handler.env["SHOAL_FL_HIDDEN"] = std::to_string(job->spec.hidden);
    f.handler.env["SHOAL_FL_INPUTS"] = std::to_string(JobArchitecture(job->spec).inputs);
    f.handler.env["SHOAL_FL_AGG_DEVICE"] = job->spec.aggregation_device;  // the leaf's fold device
    // A robust job's leaves validate and answer; the rule runs at the top (robust_commit.h).
    f.handler.env["SHOAL_FL_FOLD"] = job->Robust() ? "none" : "sum";
    f.concurrency = std::max(1u, job->spec.max_fan_in);
    f.min_scale = 1;
    f.max_scale = std::max(1u, job->spec.max_leaves);
    f.timeout_s = config_.default_timeout_s;
    f.keep_alive_s = config_.default_keep_alive_s;
    f.max_body_bytes = config_.max_body_bytes;
    f.generation = job->spec.generation;
    out.push_back(std::move(f));
  }
  return out;
}

// ---- jobs -----------------------------------------------------------------------------------

namespace {

// The parts of a job that follow from its spec (algorithm, version store, scheduler).
Status InitJob(FlCoordinator::JobState& job) {
  auto algo = MakeJobAlgorithm(job.spec);
  if (!algo.ok()) return algo.status();
  job.algo = std::move(*algo);
  // Only Δ-based algorithms read old versions; the others keep none (a model can be large).
  if (job.algo->needs_base_versions()) {
    job.store = std::make_unique<agg::VersionStore>(job.spec.staleness_limit);
  }
  if (job.spec.algorithm == "fedcompass") {
    job.scheduler = std::make_unique<agg::FedCompassScheduler>(LibraryParams(job.spec).fedcompass);
  }
  const FlJobSpec& s = job.spec;
  const uint32_t min_round = s.round_deadline_s > 0 ? std::max(1u, s.quorum)
                                                    : (s.quorum > 0 ? s.quorum : s.clients);
  return CheckRobustSpec(s, job.algo->synchronous(), min_round);
}

}  // namespace

Status FlCoordinator::DeployJob(const FlJobSpec& in) {
  auto job = std::make_shared<JobState>();
  job->spec = in;
  SHOAL_RETURN_IF_ERROR(InitJob(*job));
  auto mspec = model::ArchitectureSpec(in.architecture, JobArchitecture(in));
  if (!mspec.ok()) {
    return InvalidArgument("spec.model.architecture: " + mspec.status().message());
  }
  job->mspec = *mspec;
  if (!in.initial_model.empty()) {
    std::ifstream f(in.initial_model, std::ios::binary);
    if (!f) return InvalidArgument("spec.model.initial: cannot read " + in.initial_model);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto m = model::ModelFromSafetensors(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        job->mspec);
    if (!m.ok()) return InvalidArgument("spec.model.initial: " + m.status().message());
    job->state.weights = std::move(m->values);
  } else {
    job->state.weights = model::InitModel(job->mspec, in.seed).values;
  }
  uint64_t durable = 0;  // the deployed job is on disk before the deploy answers
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(in.name);
    if (it != jobs_.end() && !it->second->deleted) {
      // A re-deploy keeps the job's progress; only limits and stop conditions change.
      std::lock_guard jl(it->second->mu);
      if (it->second->spec.algorithm != in.algorithm ||
          it->second->spec.architecture != in.architecture ||
          it->second->spec.hidden != in.hidden) {
        return InvalidArgument("spec.algorithm/spec.model: job '" + in.name +
                               "' exists with another algorithm or model; delete it first");
      }
      if (it->second->spec.robust.enabled() != in.robust.enabled()) {  // rule changes are fine
        return InvalidArgument("spec.aggregation.robust: job '" + in.name + "' exists " +
                               (in.robust.enabled() ? "without" : "with") +
                               " a robust rule (its rounds are kept differently); delete it first");
      }
      FlJobSpec updated = in;
      updated.generation = it->second->spec.generation + 1;
      it->second->spec = updated;
      durable = Persist(it->second, /*with_model=*/false);
    } else {
      job->spec.generation = 1;
      job->leaf_id = next_leaf_id_--;
      job->KeepVersion();
      job->versions.push_back({0, std::nullopt, std::nullopt, 0, 0});
      job->CacheModel();
      job->dir = config_.state_dir + "/jobs/" + in.name;
      std::error_code ec;
      std::filesystem::create_directories(job->dir, ec);
      std::filesystem::remove(job->dir + "/updates.log", ec);
      SHOAL_RETURN_IF_ERROR(job->OpenLog());
      job->algo->Start(job->Elapsed());
      if (job->spec.round_deadline_s > 0) job->round_deadline = job->spec.round_deadline_s;
      durable = Persist(job);
      jobs_[in.name] = job;
      spdlog::info("fl job {}: {} on {} ({} parameters), {} clients expected, leaves: function "
                   "{} (fan-in {}, up to {})",
                   in.name, in.algorithm, in.architecture, job->mspec.num_params(), in.clients,
                   LeafFunction(in.name), in.max_fan_in, in.max_leaves);
    }
  }
  writer_->Wait(durable);
  if (auto job = Find(in.name)) PrepareSpareModel(*job);
  if (on_change_) on_change_();
  return {};
}

Status FlCoordinator::DeleteJob(const std::string& name) {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end() || it->second->deleted) return NotFound("FL job '" + name + "' not found");
    job = it->second;
    job->deleted = true;
    jobs_.erase(it);
  }
  {
    std::lock_guard jl(job->mu);
    // Buffers still held for uncommitted updates go back to the pool.
    if (job->pool != nullptr) {
      for (auto& [id, t] : job->tickets) (void)job->pool->Release(t.buffer, kCoordinatorSlot);
      for (const auto& u : job->undurable) {
        for (uint64_t b : u.buffers) (void)job->pool->Release(b, kCoordinatorSlot);
      }
      for (uint64_t off : job->warm_partials) (void)job->pool->Release(off, kShoaldSlot);
      for (auto& [id, r] : job->rounds) {
        for (auto& [inst, p] : r.partials) {
          if (p.offset != 0) (void)job->pool->Release(p.offset, kShoaldSlot);
        }
      }
    }
    job->tickets.clear();
    job->rounds.clear();
    job->undurable.clear();
    job->warm_partials.clear();
  }
  writer_->Flush();  // no queued checkpoint of the job writes its directory again
  std::error_code ec;
  std::filesystem::remove_all(config_.state_dir + "/jobs/" + name, ec);
  spdlog::info("fl job {} deleted", name);
  if (on_change_) on_change_();
  return {};
}

Result<TaskResult> FlCoordinator::Task(const std::string& name, const std::string& client_id,
                                       const std::string& token) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  auto it = job->clients.find(client_id);
  if (it == job->clients.end()) return NotFound("unknown client '" + client_id + "'");
  if (it->second.token != token) return PermissionDenied("bad token for client '" + client_id + "'");
  TaskResult t;
  if (job->done) {
    t.kind = TaskResult::Kind::kDone;
    return t;
  }
  if (job->Sync() && it->second.submitted_round != UINT64_MAX &&
      job->rounds.count(it->second.submitted_round) != 0) {
    // Its update for this round is in; the next task comes with the next version.
    t.kind = TaskResult::Kind::kWait;
    t.retry_after_ms = 200;
    return t;
  }
  t.kind = TaskResult::Kind::kTrain;
  t.model_version = job->version();
  t.local_steps = job->spec.local_steps;
  t.learning_rate = job->spec.learning_rate;
  t.batch_size = job->spec.batch_size;
  if (job->Compass()) {
    JobState::CompassTask& c = job->compass_tasks[client_id];
    if (!c.started) {
      // Start: every client trains Q_max steps from the initial model; the scheduler's clock
      // starts with the first fetch.
      job->scheduler->Start(job->Elapsed());
      c.started = true;
      c.ready = true;
      c.steps = job->spec.local_steps;
      c.version = job->version();
    }
    if (!c.ready) {
      t.kind = TaskResult::Kind::kWait;
      t.retry_after_ms = 100;
      return t;
    }
    c.ready = false;
    t.model_version = std::max(c.version, job->version());
    t.local_steps = c.steps;
  }
  return t;
}

std::vector<std::string> FlCoordinator::ListJobs() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, job] : jobs_) out.push_back(name);
  return out;
}

Result<std::string> FlCoordinator::JobNamespace(const std::string& name) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  return job->spec.tenant;
}

Result<std::string> FlCoordinator::JobStatusJson(const std::string& name) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  Json versions = Json::array();
  for (const auto& v : job->versions) {
    versions.push_back({{"version", v.version},
                        {"accuracy", v.accuracy ? Json(*v.accuracy) : Json(nullptr)},
                        {"loss", v.loss ? Json(*v.loss) : Json(nullptr)},
                        {"updates", v.updates},
                        {"elapsed_s", v.elapsed_s}});
  }
  Json j = {{"name", name},
            {"algorithm", job->spec.algorithm},
            {"state", job->done ? "done" : "running"},
            {"version", job->version()},
            {"round", job->open_round},
            {"clients", {{"expected", job->spec.clients}, {"joined", job->clients.size()}}},
            {"updates_total", job->updates_total},
            {"gpu_fallbacks", job->gpu_fallbacks},
            {"elapsed_s", job->Elapsed()},
            {"target_accuracy", job->spec.target_accuracy},
            {"target_rounds", job->spec.rounds},  // spec.stop.rounds; 0: none
            {"best_accuracy", job->best_accuracy},
            {"leaf_function", LeafFunction(name)},
            // What the ONNX export (inference::JobModelAsOnnx: `shoal fl model --format onnx`,
            // ?format=onnx) and the inference handler rebuild the graph from: the architecture
            // and its widths.
            {"model",
             {{"architecture", job->spec.architecture},
              {"hidden", job->spec.hidden},
              {"inputs", JobArchitecture(job->spec).inputs},
              {"classes", JobArchitecture(job->spec).classes},
              {"params", job->mspec.num_params()}}},
            {"versions", versions}};
  // Every client: its accepted updates and their staleness: `staleness` counts the versions
  // committed since the base version of its latest accepted update (it grows while the client
  // trains), `staleness_at_arrival` and `max_staleness` are what the algorithm weighted.
  // FedCompass adds what the scheduler made of it: its speed estimate (seconds per local step,
  // measured from its assignments' start to its arrivals), the steps it is assigned next and
  // its arrival group (times on the job's clock, as elapsed_s; null once the group is closed).
  std::map<agg::GroupId, agg::FedCompassScheduler::GroupView> open_groups;
  if (job->Compass()) {
    for (agg::GroupId g : job->scheduler->open_groups()) {
      if (auto v = job->scheduler->group(g)) open_groups.emplace(g, std::move(*v));
    }
  }
  Json clients = Json::array();
  Json suspects = Json::array();
  for (const auto& [id, c] : job->clients) {
    const auto base = c.last_base_version;
    // A restart may resume from a checkpoint older than a re-folded update's base.
    const auto lag = [&](uint64_t b) { return job->version() > b ? job->version() - b : 0; };
    Json e = {{"id", id},
              {"name", c.name},
              {"updates", c.updates},
              {"last_update_steps", c.last_update_steps},
              {"base_version", base ? Json(*base) : Json(nullptr)},
              {"staleness", base ? Json(lag(*base)) : Json(nullptr)},
              {"staleness_at_arrival", base ? Json(c.last_staleness) : Json(nullptr)},
              {"max_staleness", c.max_staleness}};
    if (job->Robust()) {
      e["suspect_updates"] = c.suspect_updates;
      e["clipped_updates"] = c.clipped_updates;
      Json last = nullptr;
      if (c.last_verdict) {
        last = JobState::VerdictJson(*c.last_verdict);
        last["version"] = c.last_verdict_version;
      }
      e["robust"] = std::move(last);
      if (c.suspect_updates > 0) {
        suspects.push_back({{"id", id}, {"name", c.name}, {"suspect_updates", c.suspect_updates},
                            {"updates", c.updates}});
      }
    }
    if (job->Compass()) {
      const agg::ClientId cid = NumericId(id);
      const auto speed = job->scheduler->speed(cid);
      const auto assignment = job->scheduler->assignment(cid);
      e["speed_s_per_step"] = speed ? Json(*speed) : Json(nullptr);
      e["assigned_steps"] = assignment ? Json(assignment->local_steps) : Json(nullptr);
      Json group = nullptr;
      if (assignment) {
        group = {{"id", assignment->group},
                 {"open", false},
                 {"expected_arrival_s", nullptr},
                 {"latest_arrival_s", nullptr},
                 {"arrived", false}};
        if (auto g = open_groups.find(assignment->group); g != open_groups.end()) {
          group["open"] = true;
          group["expected_arrival_s"] = g->second.expected_arrival;
          group["latest_arrival_s"] = g->second.latest_arrival;
          group["arrived"] = std::find(g->second.arrived.begin(), g->second.arrived.end(), cid) !=
                             g->second.arrived.end();
        }
      }
      e["group"] = std::move(group);
    }
    clients.push_back(std::move(e));
  }
  if (job->Compass()) j["compass"] = {{"clients", clients}};
  if (job->Robust()) {
    // spec.aggregation.robust, the clients with updates it excluded or down-weighted, and what
    // it made of each update of the last robust commit.
    const FlRobustSpec& r = job->spec.robust;
    j["robust"] = {{"rule", r.rule},
                   {"clip_norm", r.clip_median     ? Json("median")
                                 : r.clip_norm > 0 ? Json(r.clip_norm)
                                                   : Json(nullptr)},
                   {"suspects", std::move(suspects)},
                   {"last_commit", job->robust_last.is_null() ? Json(nullptr) : job->robust_last}};
    if (r.rule == "trimmedMean") j["robust"]["beta"] = r.beta;
    if (r.rule == "krum") {
      j["robust"]["f"] = r.f;
      j["robust"]["m"] = r.m;
    }
    if (r.rule == "flag") j["robust"]["rank"] = r.rank;
  }
  j["clients"]["list"] = std::move(clients);
  return j.dump() + "\n";
}

Result<JoinResult> FlCoordinator::Join(const std::string& name, const std::string& client_name,
                                       const std::string& join_token) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  JobState::Client c;
  uint64_t durable;
  {
    std::lock_guard jl(job->mu);
    const auto& tokens = job->spec.join_tokens;
    if (!tokens.empty() && std::find(tokens.begin(), tokens.end(), join_token) == tokens.end()) {
      return PermissionDenied("job '" + name + "' needs a valid join token");
    }
    c.id = "c" + std::to_string(job->next_client++);
    c.name = client_name.empty() ? c.id : client_name;
    c.token = RandomToken();
    job->clients[c.id] = c;
    durable = Persist(job, /*with_model=*/false);
  }
  // The client's token is on disk before the client has it (a restart still knows it).
  writer_->Wait(durable);
  return JoinResult{c.id, c.token};
}

Result<ModelBlob> FlCoordinator::Model(const std::string& name, std::optional<uint64_t> version) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  const uint64_t v = version.value_or(job->version());
  auto it = job->models.find(v);
  if (it == job->models.end()) {
    return NotFound("model version " + std::to_string(v) + " of job '" + name +
                    "' is not kept (current " + std::to_string(job->version()) + ")");
  }
  return ModelBlob{v, it->second};
}

Status FlCoordinator::Evaluate(const std::string& name, const EvalReport& r) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  auto it = job->clients.find(r.client_id);
  if (it == job->clients.end()) return NotFound("unknown client '" + r.client_id + "'");
  if (it->second.token != r.token) return PermissionDenied("bad token for client '" + r.client_id + "'");
  if (!(r.accuracy >= 0 && r.accuracy <= 1) || !std::isfinite(r.loss)) {
    return InvalidArgument("accuracy must be in [0,1] and loss finite");
  }
  for (auto& v : job->versions) {
    if (v.version != r.version) continue;
    v.accuracy = r.accuracy;
    v.loss = r.loss;
    job->best_accuracy = std::max(job->best_accuracy, r.accuracy);
    if (job->spec.target_accuracy > 0 && r.accuracy >= job->spec.target_accuracy && !job->done) {
      job->done = true;
      spdlog::info("fl job {}: version {} reached accuracy {:.4f} (target {}): done", name,
                   r.version, r.accuracy, job->spec.target_accuracy);
    }
    Persist(job, /*with_model=*/false);
    return {};
  }
  return NotFound("version " + std::to_string(r.version) + " of job '" + name + "' unknown");
}

// ---- the update path ------------------------------------------------------------------------

Result<FlAdmission> FlCoordinator::Admit(std::string_view name, BufferPool& pool,
                                         std::span<const std::byte> body, uint64_t buffer) {
  auto job = Find(std::string(name));
  if (!job) return NotFound("FL job '" + std::string(name) + "' not found");
  // Only the header is read here (on a gateway loop); the leaf validates the tensors.
  if (body.size() < model::kUpdatePrefixBytes ||
      std::memcmp(body.data(), model::kUpdateMagic, 4) != 0) {
    return InvalidArgument("not an update: the body must start with \"SHU1\"");
  }
  uint32_t hlen;
  std::memcpy(&hlen, body.data() + 4, 4);
  if (hlen > body.size() - model::kUpdatePrefixBytes || hlen > (1u << 20)) {
    return InvalidArgument("update header length " + std::to_string(hlen) + " runs past the body");
  }
  shoal::v1::UpdateHeader h;
  if (!h.ParseFromArray(body.data() + model::kUpdatePrefixBytes, static_cast<int>(hlen))) {
    return InvalidArgument("update header does not parse as a shoal.v1.UpdateHeader");
  }
  std::lock_guard jl(job->mu);
  if (h.job() != name) {
    return InvalidArgument("update is for job '" + h.job().substr(0, 64) + "', not '" +
                           std::string(name) + "'");
  }
  auto cit = job->clients.find(h.client_id());
  if (cit == job->clients.end()) return NotFound("unknown client '" + h.client_id().substr(0, 64) + "'");
  JobState::Client& client = cit->second;
  if (client.token != h.token()) return PermissionDenied("bad token for client '" + client.id + "'");
  if (job->done) return AlreadyExists("job '" + std::string(name) + "' is done");
  if (h.num_samples() == 0) return InvalidArgument("num_samples must be > 0");
  const uint64_t version = job->version();
  if (h.base_version() > version) {
    return InvalidArgument("base version " + std::to_string(h.base_version()) +
                           " is newer than the current version " + std::to_string(version));
  }
  const uint64_t staleness = version - h.base_version();
  const bool sync = job->Sync();
  if (sync && staleness != 0) {
    return AlreadyExists("stale update: trained from version " + std::to_string(h.base_version()) +
                         ", the round is for version " + std::to_string(version));
  }
  if (staleness > job->spec.staleness_limit ||
      (job->store && !job->store->Get(h.base_version()).ok())) {
    return AlreadyExists("stale update: base version " + std::to_string(h.base_version()) +
                         " is older than the staleness limit (current " +
                         std::to_string(version) + ", limit " +
                         std::to_string(job->spec.staleness_limit) + ")");
  }
  if (sync && client.submitted_round == job->open_round) {
    return AlreadyExists("client '" + client.id + "' already sent an update for this round");
  }
  const double now = job->Elapsed();
  std::optional<agg::CompassDecision> decision;
  if (job->Compass()) {
    auto d = job->scheduler->OnArrival(NumericId(client.id), now);
    if (!d.ok()) return AlreadyExists(d.status().message());
    decision = std::move(*d);
  }
  if (Status st = pool.Retain(buffer, kCoordinatorSlot); !st.ok()) {
    return Internal("cannot hold the update buffer: " + st.message());
  }
  job->pool = &pool;
  client.samples = h.num_samples();
  client.last_update_steps = h.local_steps();
  agg::UpdateMeta meta;
  meta.client_id = NumericId(client.id);
  meta.num_samples = static_cast<double>(h.num_samples());
  meta.base_version = h.base_version();
  // Staleness taken at commit (FedCompass): the leaf folds the u = 0 weight.
  meta.current_version = job->algo->staleness_at_commit() ? h.base_version() : version;
  meta.arrival_time = now;
  meta.total_samples = job->TotalSamples();
  const double coefficient = job->algo->Coefficient(meta);

  uint64_t round_id = job->open_round;
  if (decision) {
    switch (decision->action) {
      case agg::CompassAction::kApplyAlone:
        // First arrival: applied alone at once; the client's group assignment comes with it.
        round_id = job->NewRound();
        job->rounds[round_id].closed = true;
        job->rounds[round_id].assignments = decision->assignments;
        break;
      case agg::CompassAction::kBufferedInGroup:
        round_id = job->GroupRound(decision->group);
        break;
      case agg::CompassAction::kBufferedGeneral:
        // Late: the general buffer, and a new assignment at once from the current model.
        if (job->general_round == 0) job->general_round = job->NewRound();
        round_id = job->general_round;
        for (const auto& a : decision->assignments) job->SetTask(a);
        break;
      case agg::CompassAction::kAggregateGroup:
        round_id = job->GroupRound(decision->group);
        job->CloseGroup(*decision);
        break;
    }
  }
  JobState::Round& round = job->rounds[round_id];
  JobState::Ticket t;
  t.round = round_id;
  t.client = client.id;
  t.buffer = buffer;
  t.base_version = h.base_version();
  t.staleness = staleness;
  t.num_samples = h.num_samples();
  t.coefficient = coefficient;
  ++round.admitted;
  ++round.inflight;
  client.submitted_round = round_id;
  if (!job->Compass()) {
    // The round takes no more updates once it is due; later ones go to the next round.
    const bool due = sync ? round.admitted >= job->Needed()
                          : job->algo->ShouldCommit(round.admitted, now) &&
                                job->algo->NextCommitTime() == std::nullopt;
    if (due) {
      round.closed = true;
      ++job->open_round;
      if (sync && job->spec.round_deadline_s > 0) {
        job->round_deadline = now + job->spec.round_deadline_s;
      }
    }
  }
  std::lock_guard lock(mu_);
  const uint64_t id = next_ticket_++;
  job->tickets[id] = t;
  by_ticket_[id] = job;
  return FlAdmission{id, static_cast<float>(coefficient)};
}

Result<uint64_t> FlCoordinator::PartialFor(uint64_t ticket, uint32_t instance) {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) return NotFound("ticket " + std::to_string(ticket) + " unknown");
    job = it->second;
  }
  std::lock_guard jl(job->mu);
  auto tit = job->tickets.find(ticket);
  if (tit == job->tickets.end()) return NotFound("ticket gone");
  tit->second.instance = instance;
  if (job->Robust()) {
    // No partial sum: the leaf validates only (offset 0, "none"); the update is listed under
    // the round's partial 0 once acknowledged.
    tit->second.partial = 0;
    return uint64_t{0};
  }
  const uint64_t key = job->PartialKey(instance, tit->second.base_version);
  tit->second.partial = key;
  JobState::Round& round = job->rounds[tit->second.round];
  auto pit = round.partials.find(key);
  if (pit != round.partials.end()) return pit->second.offset;
  uint64_t off;
  if (!job->warm_partials.empty()) {
    off = job->warm_partials.back();
    job->warm_partials.pop_back();
    Enqueue(job);  // the commit thread zeroes the next one
  } else {
    const size_t bytes = job->mspec.num_params() * sizeof(float);
    auto fresh = job->pool->Allocate(bytes, kShoaldSlot);
    if (!fresh.ok()) return fresh.status();
    off = *fresh;
    std::memset(job->pool->Data(off).data(), 0, bytes);
  }
  round.partials[key].offset = off;
  round.partials[key].base = tit->second.base_version;
  return off;
}

void FlCoordinator::Completed(uint64_t ticket, int http_status, bool leaf_answered) {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) return;
    job = it->second;
    by_ticket_.erase(it);
  }
  bool commit = false;
  bool gpu_fallback = false;
  {
    std::lock_guard jl(job->mu);
    auto tit = job->tickets.find(ticket);
    if (tit == job->tickets.end()) return;
    JobState::Ticket& t = tit->second;
    JobState::Round& round = job->rounds[t.round];
    --round.inflight;
    bool counted = false;
    if (http_status >= 200 && http_status < 300) {
      // Logged before the gateway answers 202 (it does once this returns).
      t.seq = job->next_seq++;
      if (Status st = job->AppendLog(t); !st.ok()) {
        spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
      }
      t.acked = true;
      counted = true;
      ++round.acked;
      round.partials[t.partial].tickets.push_back(ticket);
      JobState::Client& client = job->clients[t.client];
      ++client.updates;
      client.last_base_version = t.base_version;
      client.last_staleness = t.staleness;
      client.max_staleness = std::max(client.max_staleness, t.staleness);
      ++job->updates_total;
    }
    if (!counted) {
      // Not counted: the client gets the error and may send it again.
      if (job->clients[t.client].submitted_round == t.round) {
        job->clients[t.client].submitted_round = UINT64_MAX;
      }
      // Nor does it count toward closing its round: a round it closed by count opens again
      // (unless updates went to the next round meanwhile), so the update sent again joins it.
      --round.admitted;
      if (round.closed && !job->Compass() && !job->algo->NextCommitTime() &&
          job->open_round == t.round + 1) {
        auto next = job->rounds.find(job->open_round);
        const bool next_empty = next == job->rounds.end() || next->second.admitted == 0;
        const bool still_due = job->Sync()
                                   ? round.admitted >= job->Needed()
                                   : job->algo->ShouldCommit(round.admitted, job->Elapsed());
        if (next_empty && !still_due) {
          if (next != job->rounds.end()) job->rounds.erase(next);
          round.closed = false;
          job->open_round = t.round;
        }
      }
      auto pit = round.partials.find(t.partial);
      if (http_status == 502 && pit != round.partials.end()) {
        // The leaf died, or its GPU fold failed, maybe halfway through folding this update
        // into its partial sum. The partial is rebuilt from the acknowledged updates it holds
        // (still in the pool) when the round commits: a leaf that fell back to the CPU is
        // alive and may be folding the next update into it right now.
        pit->second.rebuild = true;
        if (leaf_answered) {
          ++job->gpu_fallbacks;
          gpu_fallback = true;
          spdlog::warn("fl job {}: leaf {:#x}'s GPU fold failed; it folds on the CPU from now "
                       "on, and its partial sum is rebuilt at commit",
                       job->spec.name, t.instance);
        } else {
          spdlog::warn("fl job {}: leaf {:#x} failed; its partial sum is rebuilt at commit",
                       job->spec.name, t.instance);
        }
      }
      (void)job->pool->Release(t.buffer, kCoordinatorSlot);
      job->tickets.erase(tit);
    }
    commit = round.closed && round.inflight == 0;
  }
  if (gpu_fallback && on_gpu_fallback_) on_gpu_fallback_(job->spec.name);
  if (commit) Enqueue(job);
}

void FlCoordinator::Enqueue(std::shared_ptr<JobState> job) {
  {
    std::lock_guard lock(commit_mu_);
    commit_queue_.push_back(std::move(job));
  }
  commit_cv_.notify_one();
}

// ---- commits --------------------------------------------------------------------------------

namespace {
constexpr uint32_t kRefoldedPartial = 0x7fffffffu;  // the partial the coordinator refolds into
const agg::VersionStore& NoVersions() {
  static const agg::VersionStore empty(0);
  return empty;
}
}  // namespace

void FlCoordinator::CommitLoop() {
  Clock::time_point last_timers = Clock::now();
  for (;;) {
    std::shared_ptr<JobState> job;
    {
      std::unique_lock lock(commit_mu_);
      // Timers (FedCompass T_l, FedFix ticks, round deadlines): look every 50 ms.
      commit_cv_.wait_for(lock, std::chrono::milliseconds(50),
                          [this] { return stopping_ || !commit_queue_.empty(); });
      if (stopping_) return;
      if (!commit_queue_.empty()) {
        job = commit_queue_.front();
        commit_queue_.pop_front();
      }
    }
    if (Seconds(last_timers) >= 0.05 || !job) {
      last_timers = Clock::now();
      Timers();
    }
    if (!job) continue;
    std::vector<uint64_t> reuse;  // partial sums of committed rounds, to zero for the next
    std::vector<uint64_t> committed_versions;  // for on_commit_, once the job's lock is released
    std::vector<std::pair<std::string, std::string>> suspects;  // for on_suspect_, likewise
    {
      std::lock_guard jl(job->mu);
      if (job->deleted) continue;
      // Commit every closed round whose updates have all answered, oldest first.
      for (auto rit = job->rounds.begin(); rit != job->rounds.end();) {
        JobState::Round& round = rit->second;
        JobState::Round* partner =
            round.merge_round != 0 && job->rounds.count(round.merge_round)
                ? &job->rounds[round.merge_round]
                : nullptr;
        if (!round.closed || round.inflight != 0 || round.merged ||
            (partner != nullptr && partner->inflight != 0)) {
          if (!job->Compass() && !round.closed) break;
          ++rit;
          continue;
        }
        if (partner != nullptr) {
          // One commit for the group and the general buffer: move the buffer's partial sums in.
          for (auto& [key, p] : partner->partials) round.partials[key | (uint64_t{1} << 63)] = p;
          round.acked += partner->acked;
          job->rounds.erase(round.merge_round);
          round.merge_round = 0;
        }
        const auto t0 = Clock::now();
        const size_t n = job->mspec.num_params();
        double merge_ms = 0, step_ms = 0, cache_ms = 0;
        const size_t seqs_partials = round.partials.size();
        bool committed = false;
        Status merged;
        if (round.acked > 0 && job->Robust()) {
          // The rule over the round's updates in the pool (robust_commit.h), then the step.
          merged = job->RobustTotal(round, *robust_, &suspects);
          merge_ms = Seconds(t0) * 1e3;
        } else if (round.acked > 0) {
          // The top of the hierarchy: add the leaves' partial sums, then the algorithm's step.
          job->total.Reset();
          for (auto& [inst, p] : round.partials) {
            if (p.rebuild) {
              // No leaf writes it now (every update of the round has answered): from scratch.
              float* acc = reinterpret_cast<float*>(job->pool->Data(p.offset).data());
              std::fill(acc, acc + n, 0.0f);
              const size_t refolded = job->Refold(acc, p.tickets);
              p.rebuild = false;
              spdlog::warn("fl job {}: partial sum rebuilt from {} acknowledged update(s)",
                           job->spec.name, refolded);
            }
            std::vector<std::pair<uint64_t, double>> folded;
            for (uint64_t tid : p.tickets) {
              const JobState::Ticket& t = job->tickets[tid];
              folded.emplace_back(t.base_version, t.coefficient);
            }
            const auto* leaf = reinterpret_cast<const float*>(job->pool->Data(p.offset).data());
            const double scale = job->algo->staleness_at_commit()
                                     ? job->algo->CommitScale(job->version() - std::min(p.base, job->version()))
                                     : 1.0;
            if (Status st = job->total.MergeFolded({leaf, n}, folded, scale, merge_pool_.get()); !st.ok()) {
              spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
            }
          }
          merge_ms = Seconds(t0) * 1e3;
        }
        if (round.acked > 0) {
          Status st = merged.ok() ? job->algo->Commit(job->total,
                                                      job->store ? *job->store : NoVersions(),
                                                      job->state)
                                  : merged;
          if (!st.ok()) {
            spdlog::error("fl job {}: commit of {} update(s) failed: {}", job->spec.name,
                          round.acked, st.ToString());
          } else {
            committed = true;
            step_ms = Seconds(t0) * 1e3 - merge_ms;
            job->KeepVersion();
            job->CacheModel();
            cache_ms = Seconds(t0) * 1e3 - merge_ms - step_ms;
            job->versions.push_back({job->version(), std::nullopt, std::nullopt, round.acked,
                                     job->Elapsed()});
            if (job->spec.rounds > 0 && job->version() >= job->spec.rounds) job->done = true;
          }
        }
        // The partial sums go back to the pool now; the updates once the checkpoint naming this
        // version is written (until then a crash re-folds them from the log: Durable).
        JobState::Undurable u;
        u.version = job->version();
        for (auto& [inst, p] : round.partials) {
          for (uint64_t tid : p.tickets) {
            const JobState::Ticket& t = job->tickets[tid];
            u.buffers.push_back(t.buffer);
            u.records.push_back(JobState::RecordOf(t));
            job->tickets.erase(tid);
          }
          // Its pages are warm: zeroed again behind the commit for the next round's leaves.
          if (p.offset == 0) continue;  // a robust job's rounds have none
          if (job->warm_partials.size() + reuse.size() < job->WarmPartialsWanted()) {
            reuse.push_back(p.offset);
          } else {
            (void)job->pool->Release(p.offset, kShoaldSlot);
          }
        }
        if (!u.records.empty()) job->undurable.push_back(std::move(u));
        for (const auto& a : round.assignments) job->SetTask(a);
        rit = job->rounds.erase(rit);
        if (job->Sync() && job->spec.round_deadline_s > 0) {
          job->round_deadline = job->Elapsed() + job->spec.round_deadline_s;
        }
        const double before_persist_ms = Seconds(t0) * 1e3;
        Persist(job);
        if (committed) {
          committed_versions.push_back(job->version());
          spdlog::info("fl job {}: version {} committed from {} update(s) over {} leaf partial "
                       "sum(s) in {:.2f} ms (top merge {:.1f}, {} step {:.1f}, model bytes {:.1f}, "
                       "checkpoint queued {:.1f}){}",
                       job->spec.name, job->version(), job->versions.back().updates,
                       job->total.count() == 0 ? 0 : seqs_partials, Seconds(t0) * 1e3, merge_ms,
                       job->spec.algorithm, step_ms, cache_ms, Seconds(t0) * 1e3 - before_persist_ms,
                       job->done ? " (last)" : "");
        }
      }
    }
    if (on_commit_) {
      for (uint64_t v : committed_versions) on_commit_(job->spec.name, v);
    }
    if (on_suspect_) {
      for (const auto& [client, rule] : suspects) on_suspect_(job->spec.name, client, rule);
    }
    PrepareWarmPartials(*job, std::move(reuse));
    PrepareSpareModel(*job);
  }
}

void FlCoordinator::Timers() {
  std::vector<std::shared_ptr<JobState>> jobs;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, j] : jobs_) jobs.push_back(j);
  }
  for (auto& job : jobs) {
    bool due = false;
    {
      std::lock_guard jl(job->mu);
      if (job->deleted || job->done) continue;
      const double now = job->Elapsed();
      if (job->Compass()) {
        for (const auto& d : job->scheduler->OnTimer(now)) {
          if (d.action == agg::CompassAction::kAggregateGroup) {
            job->CloseGroup(d);
            due = true;
          }
        }
      } else if (job->algo->NextCommitTime() && job->algo->ShouldCommit(0, now)) {
        // FedFix's tick: whatever arrived since the last one commits (nothing: no version).
        auto it = job->rounds.find(job->open_round);
        if (it != job->rounds.end() && it->second.admitted > 0) {
          it->second.closed = true;
          ++job->open_round;
          due = true;
        }
        job->algo->OnCommitted(now);
      } else if (job->Sync() && job->spec.round_deadline_s > 0 && now >= job->round_deadline) {
        auto it = job->rounds.find(job->open_round);
        const uint32_t have = it == job->rounds.end() ? 0 : it->second.admitted;
        const uint32_t quorum = std::max(1u, job->spec.quorum);
        if (have >= quorum) {
          spdlog::info("fl job {}: round {} reached its deadline with {} of {} update(s) "
                       "(quorum {}): committing",
                       job->spec.name, job->open_round, have, job->spec.clients, quorum);
          it->second.closed = true;
          ++job->open_round;
          due = true;
        } else {
          // Below quorum: the round stays open for another deadline (no update is dropped).
          spdlog::warn("fl job {}: round {} missed its deadline with {} of quorum {} "
                       "update(s): extended by {} s",
                       job->spec.name, job->open_round, have, quorum, job->spec.round_deadline_s);
        }
        job->round_deadline = now + job->spec.round_deadline_s;
      }
    }
    if (due) Enqueue(job);
  }
}

uint64_t FlCoordinator::Persist(const std::shared_ptr<JobState>& jp, bool with_model) {
  JobState& job = *jp;
  Json clients = Json::array();
  for (const auto& [id, c] : job.clients) {
    clients.push_back(
        {{"id", c.id},
         {"name", c.name},
         {"token", c.token},
         {"updates", c.updates},
         {"samples", c.samples},
         {"last_base_version", c.last_base_version ? Json(*c.last_base_version) : Json(nullptr)},
         {"last_staleness", c.last_staleness},
         {"max_staleness", c.max_staleness},
         {"suspect_updates", c.suspect_updates},
         {"clipped_updates", c.clipped_updates}});
  }
  Json versions = Json::array();
  for (const auto& v : job.versions) {
    versions.push_back({{"version", v.version},
                        {"accuracy", v.accuracy ? Json(*v.accuracy) : Json(nullptr)},
                        {"loss", v.loss ? Json(*v.loss) : Json(nullptr)},
                        {"updates", v.updates},
                        {"elapsed_s", v.elapsed_s}});
  }
  Json state = {{"spec", SpecToJson(job.spec)},  {"version", job.version()},
                {"clients", clients},            {"next_client", job.next_client},
                {"versions", versions},          {"updates_total", job.updates_total},
                {"elapsed_s", job.Elapsed()},    {"done", job.done},
                {"best_accuracy", job.best_accuracy}, {"leaf_id", job.leaf_id},
                {"open_round", job.open_round},  {"next_seq", job.next_seq},
                {"last_commit_seqs", job.UndurableSeqs()}};
  if (job.scheduler) {
    Json tasks = Json::object();
    for (const auto& [id, t] : job.compass_tasks) {
      tasks[id] = {{"steps", t.steps}, {"version", t.version}, {"ready", t.ready},
                   {"started", t.started}};
    }
    Json groups = Json::array();
    for (const auto& [g, r] : job.group_round) groups.push_back({g, r});
    state["compass"] = {{"scheduler", job.scheduler->Save()},
                        {"tasks", tasks},
                        {"group_round", groups},
                        {"general_round", job.general_round}};
  }
  CheckpointWriter::Item item;
  item.job = job.spec.name;
  item.dir = config_.state_dir + "/jobs/" + job.spec.name;
  item.version = job.version();
  auto it = job.models.find(job.version());
  if (with_model && it != job.models.end()) item.model = it->second;
  if (with_model && (!job.state.momentum.empty() || !job.state.second_moment.empty())) {
    agg::ModelState opt;
    opt.version = job.version();
    opt.momentum = job.state.momentum;
    opt.second_moment = job.state.second_moment;
    item.optimizer = std::make_shared<const std::vector<uint8_t>>(opt.Serialize());
  }
  item.state = state.dump();
  if (with_model) {
    item.on_durable = [weak = std::weak_ptr<JobState>(jp), v = job.version()] {
      auto job = weak.lock();
      if (!job) return;
      std::lock_guard jl(job->mu);
      if (!job->deleted && job->pool != nullptr) job->Durable(v);
    };
  }
  return writer_->Enqueue(std::move(item));
}

namespace {
std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
}  // namespace

Status FlCoordinator::Restore() {
  const std::string root = config_.state_dir + "/jobs";
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) return {};
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string dir = entry.path().string();
    std::ifstream sf(dir + "/state.json");
    if (!sf) continue;
    Json state = Json::parse(sf, nullptr, false);
    if (state.is_discarded()) return Internal("corrupt FL job state: " + dir + "/state.json");
    auto job = std::make_shared<JobState>();
    job->spec = SpecFromJson(state["spec"]);
    job->dir = dir;
    if (Status st = InitJob(*job); !st.ok()) {
      return Internal("FL job checkpoint " + dir + ": " + st.message());
    }
    auto mspec = model::ArchitectureSpec(job->spec.architecture, JobArchitecture(job->spec));
    if (!mspec.ok()) return mspec.status();
    job->mspec = *mspec;
    job->state.version = state.value("version", uint64_t{0});
    // The files of the version state.json names (model.safetensors and optimizer.bin: the
    // layout before versioned files).
    auto existing = [&dir](const std::string& name, const std::string& legacy) {
      std::error_code ec;
      return std::filesystem::exists(dir + "/" + name, ec) ? dir + "/" + name : dir + "/" + legacy;
    };
    const std::string model_path = existing(ModelFile(job->version()), "model.safetensors");
    std::string bytes = ReadFile(model_path);
    auto m = model::ModelFromSafetensors(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        job->mspec);
    if (!m.ok()) return Internal("FL job checkpoint " + model_path + ": " + m.status().message());
    job->state.weights = std::move(m->values);
    const std::string opt_path = existing(OptimizerFile(job->version()), "optimizer.bin");
    const std::string opt_bytes = ReadFile(opt_path);
    if (!opt_bytes.empty()) {
      auto opt = agg::ModelState::Deserialize(
          {reinterpret_cast<const uint8_t*>(opt_bytes.data()), opt_bytes.size()});
      if (!opt.ok()) return Internal("FL job checkpoint " + opt_path + ": " + opt.status().message());
      if (opt->version == job->state.version) {
        job->state.momentum = std::move(opt->momentum);
        job->state.second_moment = std::move(opt->second_moment);
      } else {
        spdlog::warn("fl job {}: optimizer state is for version {}, the model {}: restarting it",
                     job->spec.name, opt->version, job->state.version);
      }
    }
    job->KeepVersion();
    job->models[job->version()] = std::make_shared<std::string>(std::move(bytes));
    for (const auto& c : state["clients"]) {
      JobState::Client cl;
      cl.id = c.value("id", "");
      cl.name = c.value("name", "");
      cl.token = c.value("token", "");
      cl.updates = c.value("updates", uint64_t{0});
      cl.samples = c.value("samples", uint64_t{0});
      if (c.contains("last_base_version") && c["last_base_version"].is_number_unsigned()) {
        cl.last_base_version = c["last_base_version"].get<uint64_t>();
      }
      cl.last_staleness = c.value("last_staleness", uint64_t{0});
      cl.max_staleness = c.value("max_staleness", uint64_t{0});
      cl.suspect_updates = c.value("suspect_updates", uint64_t{0});
      cl.clipped_updates = c.value("clipped_updates", uint64_t{0});
      job->clients[cl.id] = cl;
    }
    job->next_client = state.value("next_client", 0u);
    for (const auto& v : state["versions"]) {
      JobState::VersionInfo vi;
      vi.version = v.value("version", uint64_t{0});
      if (v["accuracy"].is_number()) vi.accuracy = v["accuracy"].get<double>();
      if (v["loss"].is_number()) vi.loss = v["loss"].get<double>();
      vi.updates = v.value("updates", 0u);
      vi.elapsed_s = v.value("elapsed_s", 0.0);
      job->versions.push_back(vi);
    }
    job->updates_total = state.value("updates_total", uint64_t{0});
    job->elapsed_before = state.value("elapsed_s", 0.0);
    job->done = state.value("done", false);
    job->best_accuracy = state.value("best_accuracy", 0.0);
    job->leaf_id = state.value("leaf_id", 4095u);
    job->open_round = std::max(state.value("open_round", job->version() + 1), uint64_t{1});
    job->next_seq = state.value("next_seq", uint64_t{1});
    if (job->scheduler && state.contains("compass")) {
      const Json& c = state["compass"];
      if (Status st = job->scheduler->Load(c.value("scheduler", std::string())); !st.ok()) {
        return Internal("FL job checkpoint " + dir + ": " + st.message());
      }
      for (const auto& [id, t] : c["tasks"].items()) {
        job->compass_tasks[id] = {t.value("steps", 0u), t.value("version", uint64_t{0}),
                                  t.value("ready", false), t.value("started", false)};
      }
      for (const auto& g : c["group_round"]) {
        job->group_round[g.at(0).get<agg::GroupId>()] = g.at(1).get<uint64_t>();
      }
      job->general_round = c.value("general_round", uint64_t{0});
    }
    job->algo->Start(job->Elapsed());
    if (job->spec.round_deadline_s > 0) job->round_deadline = job->Elapsed() + job->spec.round_deadline_s;
    // The update log: records the checkpoint does not include are re-folded by Recover.
    const std::string log = ReadFile(dir + "/updates.log");
    const auto seqs = state.value("last_commit_seqs", std::vector<uint64_t>{});
    const std::set<uint64_t> committed(seqs.begin(), seqs.end());
    for (size_t off = 0; off + sizeof(LogRecord) <= log.size(); off += sizeof(LogRecord)) {
      LogRecord r;
      std::memcpy(&r, log.data() + off, sizeof r);
      if (r.magic != LogRecord::kMagic) break;  // a torn tail
      job->next_seq = std::max(job->next_seq, r.seq + 1);
      if (committed.count(r.seq) != 0) continue;
      job->recovered.push_back(r);
    }
    // The log keeps only what the checkpoint does not include: the next state.json written
    // (whose last_commit_seqs name only versions committed from now on) stays true of it.
    if (Status st = WriteFileAtomic(dir + "/updates.log", job->recovered.data(),
                                    job->recovered.size() * sizeof(LogRecord));
        !st.ok()) {
      return Internal("FL job checkpoint " + dir + ": update log: " + st.message());
    }
    SHOAL_RETURN_IF_ERROR(job->OpenLog());
    std::lock_guard lock(mu_);
    next_leaf_id_ = std::min(next_leaf_id_, job->leaf_id - 1);
    spdlog::info("fl job {}: resumed at version {} ({} clients, {} updates so far, {} logged "
                 "update(s) to re-fold)",
                 job->spec.name, job->version(), job->clients.size(), job->updates_total,
                 job->recovered.size());
    jobs_[job->spec.name] = job;
  }
  return {};
}

Status FlCoordinator::Recover(const std::function<Result<SharedPool*>(const std::string&)>& pool_for) {
  std::vector<std::shared_ptr<JobState>> jobs;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, j] : jobs_) jobs.push_back(j);
  }
  std::map<SharedPool*, std::set<uint64_t>> kept;  // per pool: the buffers the logs still name
  for (auto& job : jobs) {
    std::lock_guard jl(job->mu);
    auto pool = pool_for(job->spec.tenant);
    if (!pool.ok()) return pool.status();
    SharedPool* sp = *pool;
    std::set<uint64_t>& keep = kept[sp];
    if (job->recovered.empty()) continue;
    job->pool = sp;
    const std::vector<uint64_t> held = sp->HeldBy(kCoordinatorSlot);
    const std::set<uint64_t> held_set(held.begin(), held.end());
    const size_t bytes = job->mspec.num_params() * sizeof(float);
    uint64_t max_round = 0;
    size_t refolded = 0;
    for (const LogRecord& r : job->recovered) {
      const std::string client(r.client, strnlen(r.client, sizeof r.client));
      if (held_set.count(r.buffer) == 0 || job->clients.count(client) == 0) {
        spdlog::error("fl job {}: logged update {} of client {} is not in the pool any more "
                      "(was the pool recreated?): lost",
                      job->spec.name, r.seq, client);
        continue;
      }
      JobState::Round& round = job->rounds[r.round];
      const uint64_t key = job->Robust() ? 0 : job->PartialKey(kRefoldedPartial, r.base_version);
      auto pit = round.partials.find(key);
      if (pit == round.partials.end() && job->Robust()) {
        // Nothing to re-fold: the rule reads the update from the pool at commit.
        pit = round.partials.emplace(key, JobState::Partial{0, {}, r.base_version}).first;
      } else if (pit == round.partials.end()) {
        auto off = sp->Allocate(bytes, kShoaldSlot);
        if (!off.ok()) return off.status();
        std::memset(sp->Data(*off).data(), 0, bytes);
        pit = round.partials.emplace(key, JobState::Partial{*off, {}, r.base_version}).first;
      }
      JobState::Ticket t;
      t.round = r.round;
      t.client = client;
      t.buffer = r.buffer;
      t.base_version = r.base_version;
      t.num_samples = r.num_samples;
      t.coefficient = r.coefficient;
      t.instance = kRefoldedPartial;
      t.partial = key;
      t.acked = true;
      t.seq = r.seq;
      uint64_t id;
      {
        std::lock_guard lock(mu_);
        id = next_ticket_++;
      }
      job->tickets[id] = t;
      const bool kept =
          job->Robust()
              ? model::ParseUpdate(ReadPayload(sp->Data(r.buffer)).body, job->mspec).ok()
              : job->Refold(reinterpret_cast<float*>(sp->Data(pit->second.offset).data()), {id}) == 1;
      if (!kept) {
        spdlog::error("fl job {}: logged update {} of client {} no longer parses: lost",
                      job->spec.name, r.seq, client);
        job->tickets.erase(id);
        continue;
      }
      keep.insert(r.buffer);
      pit->second.tickets.push_back(id);
      ++round.admitted;
      ++round.acked;
      JobState::Client& c = job->clients[client];
      c.submitted_round = r.round;
      c.samples = r.num_samples;
      c.last_base_version = r.base_version;  // its staleness on arrival is not logged
      ++c.updates;
      ++job->updates_total;
      max_round = std::max(max_round, r.round);
      ++refolded;
    }
    job->recovered.clear();
    // Which recovered rounds are closed: every round but the open one (rounds open one at a
    // time), and the open one when it is due; FedCompass: all but the open groups' and the
    // general buffer's.
    std::set<uint64_t> open_compass;
    for (const auto& [g, r] : job->group_round) open_compass.insert(r);
    if (job->general_round != 0) open_compass.insert(job->general_round);
    const double now = job->Elapsed();
    for (auto& [rid, round] : job->rounds) {
      if (job->Compass()) {
        if (open_compass.count(rid) == 0) round.closed = true;
      } else if (rid < max_round || rid < job->open_round) {
        round.closed = true;
      } else {
        round.closed = job->Sync() ? round.admitted >= job->Needed()
                                   : job->algo->ShouldCommit(round.admitted, now) &&
                                         job->algo->NextCommitTime() == std::nullopt;
      }
    }
    if (!job->Compass()) {
      job->open_round = std::max(job->open_round, max_round);
      if (job->rounds.count(job->open_round) && job->rounds[job->open_round].closed) {
        ++job->open_round;
      }
    } else {
      job->open_round = std::max(job->open_round, max_round + 1);
      // A client whose update the checkpoint's scheduler does not know as waiting in a group
      // would wait for nothing: it trains again from the current model.
      for (auto& [id, t] : job->tickets) {
        if (open_compass.count(t.round) != 0) continue;
        auto a = job->scheduler->assignment(NumericId(t.client));
        job->SetTask(a ? *a
                       : agg::CompassAssignment{NumericId(t.client), job->spec.local_steps, 0});
      }
    }
    spdlog::info("fl job {}: re-folded {} acknowledged update(s) from the update log (rounds "
                 "up to {}, open round {})",
                 job->spec.name, refolded, max_round, job->open_round);
  }
  // Buffers held for updates that were admitted but never acknowledged: their clients got no
  // 202 and send them again.
  for (auto& [sp, keep] : kept) {
    size_t released = 0;
    for (uint64_t off : sp->HeldBy(kCoordinatorSlot)) {
      if (keep.count(off) == 0 && sp->Release(off, kCoordinatorSlot).ok()) ++released;
    }
    if (released > 0) spdlog::info("fl: released {} unacknowledged update buffer(s)", released);
  }
  for (auto& job : jobs) Enqueue(job);
  return {};
}

}  // namespace shoal
