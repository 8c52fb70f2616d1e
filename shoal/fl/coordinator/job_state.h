// FlCoordinator's job state (private to shoal_coordinator): one JobState per FL job, and the
// helpers that fl_coordinator.cc (admission, commits, status) and fl_persistence.cc (checkpoint
// state, restore, crash recovery) share.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/buffer_release.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/fl/algorithms/algorithms.h"
#include "shoal/fl/algorithms/compass_scheduler.h"
#include "shoal/fl/algorithms/model_state.h"
#include "shoal/fl/algorithms/partial_sum.h"
#include "shoal/fl/algorithms/version_store.h"
#include "shoal/fl/coordinator/client_log.h"
#include "shoal/fl/coordinator/dp_commit.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/coordinator/model_blobs.h"
#include "shoal/fl/coordinator/partial_checkpoint.h"
#include "shoal/fl/coordinator/robust_commit.h"
#include "shoal/fl/coordinator/update_log.h"
#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/kernels/worker_team.h"
#include "shoal/fl/secagg/secagg_session.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace agg = aggregator;

namespace coordinator_internal {
constexpr uint32_t kRefoldedPartial = 0x7fffffffu;  // the partial the coordinator refolds into
// Cluster mode: how long another node's admission may stay unanswered before the top asks that
// node whether it holds it (and again as often while it stays so).
constexpr double kProbeAfterS = 2.0;

double Seconds(Clock::time_point since);
// The model's shape: spec.model's architecture and width; the input width follows the dataset
// the clients train on (sklearn's digits are 8x8, Fashion-MNIST 28x28).
model::ArchitectureOptions JobArchitecture(const FlJobSpec& s);
// The job's tensors: spec.model.onnx's float initializers, or the architecture's (job_model.cc).
// `initial` (may be null) receives the ONNX file's values.
Result<model::ModelSpec> JobModelSpec(const FlJobSpec& s, std::vector<float>* initial = nullptr);
// "c17" -> 17: the scheduler's client ids.
agg::ClientId NumericId(const std::string& id);
// The leaf-aggregator function of a job (the coordinator's own jobs and FlMembers' jobs).
FunctionSpec LeafSpec(const FlJobSpec& spec, uint32_t id, std::string name,
                      const NodeConfig& config);
// Behind the commits (fl_commit.cc): a warm blob for the next version's model bytes, and the
// partial-sum buffers of committed rounds (and new ones, up to the job's want) zeroed for the
// next round's leaves.
void PrepareSpareModel(FlCoordinator::JobState& job);
void PrepareWarmPartials(FlCoordinator::JobState& job, std::vector<uint64_t> reuse);
// The server optimizer's state of `state` as the checkpoint keeps it (optimizer-<v>.bin).
inline std::shared_ptr<const std::vector<uint8_t>> OptimizerBytes(const agg::ModelState& state) {
  agg::ModelState opt;
  opt.version = state.version;
  opt.momentum = state.momentum;
  opt.second_moment = state.second_moment;
  return std::make_shared<const std::vector<uint8_t>>(opt.Serialize());
}
// A partial sum's buffer: `bytes` in `pool`, zeroed, held with kShoaldSlot.
Result<uint64_t> ZeroedPartial(BufferPool& pool, size_t bytes);
// The spec as state.json keeps it.
Json SpecToJson(const FlJobSpec& s);
FlJobSpec SpecFromJson(const Json& j);
// The parts of a job that follow from its spec (algorithm, version store, scheduler), checked.
Status InitJob(FlCoordinator::JobState& job);
// spec.privacy.secureAggregation checked against the rest of the spec, its session made
// (fl_secagg.cc); nothing for a job without it.
Status InitSecureAggregation(FlCoordinator::JobState& job);

// Takes `key`'s value (a shared_ptr) out of `map` under `mu`: null when `key` is absent.
template <class Map>
typename Map::mapped_type TakeLocked(std::mutex& mu, Map& map, const typename Map::key_type& key) {
  std::lock_guard lock(mu);
  auto it = map.find(key);
  if (it == map.end()) return nullptr;
  typename Map::mapped_type value = std::move(it->second);
  map.erase(it);
  return value;
}

}  // namespace coordinator_internal

struct FlCoordinator::JobState : std::enable_shared_from_this<FlCoordinator::JobState> {
  using LogRecord = coordinator_internal::LogRecord;
  using ClientOrder = coordinator_internal::ClientOrder;
  struct Client {
    std::string id, name, token;
    uint64_t submitted_round = UINT64_MAX;  // sync: the round it already sent an update to
    uint64_t updates = 0;
    uint64_t samples = 0;            // n_k of its latest update (FedFix's data share)
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
    // Cluster mode: the node that received and folds this update (its buffer and its log
    // record are there; `buffer` is 0 here); empty for this node's own updates. `key`: that
    // node's name for the admission; `probe_at`: when to ask that node whether it holds it, if
    // it is still unanswered then (ProbeRemoteAdmissions).
    std::string node;
    uint64_t key = 0;
    double probe_at = 0;
    uint32_t probes = 0;  // how often that node was asked (it said it holds it)
  };
  struct Partial {
    uint64_t offset = 0;            // float32[num_params] in the pool, held by shoald
    std::vector<uint64_t> tickets;  // acked updates folded into it
    uint64_t base = 0;              // their base version (staleness taken at commit)
    // A fold into it failed halfway (its leaf died, or the leaf's GPU fold failed): rebuilt
    // from `tickets` at commit, when no leaf can be writing it any more.
    bool rebuild = false;
    // Cluster mode: another node's one partial sum of the round (`offset` 0): fetched from
    // that node once every update it folds for the round has answered (FetchRemotePartials).
    std::string node{};
    std::vector<float> sum{};
    bool fetched = false;
    // spec.durability partialSums: updates folded since its last checkpoint, and whether it was
    // loaded from a checkpoint by a restart (the round's first leaf folds on into it).
    uint32_t since_checkpoint = 0;
    bool restored = false;
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

  // The job's state below (`deleted` is set under FlCoordinator::mu_ and read under either
  // lock: atomic). Taken before that mu_, never after it (fl_coordinator.h).
  std::mutex mu;
  FlJobSpec spec;
  model::ModelSpec mspec;
  std::unique_ptr<agg::AggregationAlgorithm> algo;
  agg::ModelState state;                     // weights, version, server optimizer state
  std::unique_ptr<agg::VersionStore> store;  // w_τ for Δ-based algorithms
  agg::PartialSum total;                     // the top of the tree, reused commit to commit
  std::unique_ptr<agg::FedCompassScheduler> scheduler;
  std::map<std::string, CompassTask> compass_tasks;
  std::map<agg::GroupId, uint64_t> group_round;
  uint64_t general_round = 0;
  coordinator_internal::ModelBlobs models;  // the recent versions' safetensors bytes
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
  // spec.aggregation.robust or spec.privacy.dp: the rule (robust_commit.h) or DP's clipping
  // (dp_commit.h) runs at commit over the round's updates; the leaves fold nothing and the
  // rounds have no partial-sum buffers (Partial::offset 0).
  bool Robust() const { return spec.robust.enabled() || spec.privacy.dp.enabled; }
  // How the coordinator re-parses an update in the pool: as the leaf did (a HetLoRA job's
  // lower-rank adapters included).
  model::ParseLimits RefoldLimits() const {
    model::ParseLimits l;
    l.lora_lower_rank = spec.lora.enabled() && spec.lora.method == "hetlora";
    return l;
  }
  std::unique_ptr<DpState> dp;  // spec.privacy.dp
  // spec.privacy.secureAggregation (fl_secagg.cc): the protocol rounds, the threads that expand
  // the masks at commit, and the hooks the round logic calls.
  std::unique_ptr<secagg::SecAggSession> secagg;
  std::unique_ptr<agg::WorkerTeam> secagg_team;
  bool SecAggReady(uint64_t round_id, const Round& round);
  bool CloseSecAggInput(uint64_t round_id);
  // With no lock (the commit thread owns `total` and the round): the round's masked u32 partial
  // sums added, unmasked by `plan` (PlanUnmask, taken under the lock), decoded into `total`
  // with weight 1 per survivor.
  Status SecAggTotal(const secagg::SecAggSession::UnmaskPlan& plan, const Round& round,
                     const std::map<uint64_t, Ticket>& round_tickets, BufferPool* pool,
                     agg::FoldPool* threads, std::string* sum_sha256);
  std::vector<float> robust_out;  // the rule's result, reused commit to commit
  Json robust_last;               // the last robust commit, for the status
  std::map<std::string, Client, ClientOrder> clients;
  uint32_t next_client = 0;
  // Kept as the clients change, so that no update, join or status walks the table: Σ samples of
  // the clients' latest updates and how many have sent one (TotalSamples), the clients with
  // suspect updates (the robust status), and the clients whose figures changed since the last
  // Persist (their lines in clients.log).
  uint64_t samples_sum = 0;
  uint64_t samples_seen = 0;
  std::set<std::string, ClientOrder> suspect_clients;
  std::set<std::string, ClientOrder> changed_clients;
  coordinator_internal::ClientLog client_log;
  // The lines for clients.log taken under the job's lock (joins, changed figures) and not yet
  // written: FlushClientLog writes them, in the order they were taken, with no job lock held.
  std::string pending_client_lines;
  uint64_t pending_figure_lines = 0;
  std::mutex client_log_mu;  // FlushClientLog's: taken before the job's lock, never under it
  void SetSamples(Client& c, uint64_t samples) {
    samples_sum = samples_sum - c.samples + samples;
    samples_seen += (samples > 0 ? 1 : 0) - (c.samples > 0 ? 1 : 0);
    c.samples = samples;
  }
  void Changed(const Client& c) { changed_clients.insert(c.id); }
  // clients.log (fl_persistence.cc): a joined client's line, written before it has its token
  // (QueueJoin, then FlushClientLog); the changed clients' figures, tagged with the version in
  // memory (QueueChangedClients, from Persist), the file compacted once the figure lines
  // outnumber the clients; and, on restore, the table as state.json's version `version` had it
  // (the legacy "clients" of `state` first), the file rewritten to that table and reopened.
  // Queue* run under the job's lock; FlushClientLog without it (it takes it briefly).
  void QueueJoin(const Client& c);
  void QueueChangedClients();
  Status FlushClientLog();
  Status LoadClients(const Json& state, uint64_t version);
  uint64_t durable_version = 0;  // the newest version whose checkpoint is written
  std::map<uint64_t, Round> rounds;
  uint64_t open_round = 1;
  double round_deadline = 0;  // sync with spec.deadlines.round: when the open round is due
  std::map<uint64_t, Ticket> tickets;
  BufferPool* pool = nullptr;
  // The latest versions' records (status, state.json, evaluations): a bounded history, so a
  // long job's status and checkpoint state do not grow with every commit (they did: ~1 KiB of
  // shoald's memory per update over a 300 s soak, the growing JSON strings fragmenting the heap).
  static constexpr size_t kVersionHistory = 256;
  std::vector<VersionInfo> versions;
  void AddVersion(const VersionInfo& v) {
    versions.push_back(v);
    if (versions.size() > kVersionHistory) {
      versions.erase(versions.begin(), versions.begin() + static_cast<std::ptrdiff_t>(
                                                              versions.size() - kVersionHistory));
    }
  }
  uint64_t updates_total = 0;
  uint64_t gpu_fallbacks = 0;  // leaves whose GPU fold failed (they fold on the CPU since)
  // Partial sums rebuilt at commit from their acknowledged updates (a leaf died or its GPU fold
  // failed mid-update, or a leaf refused an update it had partly folded).
  uint64_t partial_rebuilds = 0;
  Clock::time_point start = Clock::now();
  double elapsed_before = 0;  // from the checkpoint this run resumed
  bool done = false;
  std::atomic<bool> deleted{false};
  double best_accuracy = 0;
  uint32_t leaf_id = 0;
  // A round taken out by the commit thread (fl_commit.cc) and not yet swapped back in: the
  // version is about to change, so a synchronous job refuses updates of the version before as
  // stale at once (the commit used to make them wait for its lock, then refuse them), and its
  // clients' tasks wait for the new version.
  uint64_t committing_round = 0;
  // A pool buffer of one partial sum's size that a leaf folds into when no warm partial sum is
  // ready (PartialFor zeroes none on the gateway's loop): never read; the updates folded into it
  // are refolded at commit (Partial::rebuild). Held with kShoaldSlot; 0 until first needed.
  uint64_t sink = 0;
  coordinator_internal::UpdateLog log;
  std::string dir;
  uint64_t next_seq = 1;
  std::vector<LogRecord> recovered;  // read by Restore, re-folded by Recover

  // spec.durability partialSums (partial_sum_durability.cc): an update's buffer goes back to the
  // pool once its leaf folded it; the partial sums are checkpointed instead, and the clients of
  // acknowledged updates that no checkpoint includes are asked to send them again.
  bool PartialSums() const { return spec.durability.partial_sums(); }
  std::atomic<uint64_t> partial_checkpoints{0};             // written (renamed)
  std::unique_ptr<PartialCheckpointWriter> partial_writer;  // made by InitJob for partialSums
  uint64_t resend_asked = 0;  // acknowledged updates whose clients were asked to send again
  // Under the job's lock, once ticket `t` was acknowledged: its buffer released, and its
  // partial sum checkpointed when due and no fold into it is in flight.
  void FoldedDurably(Ticket& t);
  void MaybeCheckpointPartial(uint64_t round_id, uint64_t key);
  // The commit thread, no lock: every local partial sum of the round written whole before its
  // commit (a crash before the version's checkpoint then loses none of its updates).
  void CheckpointRoundPartials(uint64_t round_id, const Round& round,
                               const std::map<uint64_t, Ticket>& from);
  // Recover: the checkpoints whose updates the job's log still names (the others removed),
  // loaded into partial sums of `pool`; returns the seqs they include, by seq their key.
  Result<std::map<uint64_t, uint64_t>> LoadPartialCheckpoints(BufferPool& pool);
  // Recover: the logged update `r` of `client`, included in the loaded partial sum `key`, as the
  // acknowledged ticket `id` of its round (counted as before the restart; nothing refolded).
  void TakeCheckpointed(const LogRecord& r, const std::string& client, uint64_t key, uint64_t id);
  // The acknowledged ticket of logged update `r` of `client` whose fold is in partial sum `key`
  // (Recover: re-folded, or loaded from a partial-sum checkpoint).
  static Ticket LoggedTicket(const LogRecord& r, const std::string& client, uint64_t key);
  // A partial-sum checkpoint's head: partial `key` of round `round_id` and the log seqs of its
  // tickets found in `from`.
  PartialCheckpointHead CheckpointHead(uint64_t round_id, uint64_t key, const Partial& p,
                                       const std::map<uint64_t, Ticket>& from) const;
  // A client whose acknowledged update no partial sum keeps any more: its update is un-counted
  // and its next task asks it to train and send again (logged, counted).
  void AskToResend(const std::string& client, uint64_t round_id, uint64_t seq, const char* why);
  // TakeRound, under the lock (the round closed, no fold in flight): a partial sum to rebuild
  // cannot be refolded (its updates' buffers are gone): it is reloaded from its last checkpoint
  // (or zeroed), the updates after it are asked again, and the round reopens. True if so.
  bool ResendInsteadOfRebuild(uint64_t round_id, Round& round);

  // Cluster mode (fl_cluster_top.cc): the partial-sum key of each node that folds updates of
  // this job for it, the rounds whose other nodes' partial sums are all here, and how far the
  // checkpoints go (those nodes release a round's updates once its version is durable).
  std::map<std::string, uint64_t, std::less<>> remote_keys;
  uint64_t RemoteKey(const std::string& node) {
    auto [it, inserted] = remote_keys.try_emplace(node, 0);
    if (inserted) it->second = kRemotePartialBit | remote_keys.size();
    return it->second;
  }
  static constexpr uint64_t kRemotePartialBit = uint64_t{1} << 62;
  bool RemoteReady(const Round& r) const {
    for (const auto& [key, p] : r.partials) {
      if (!p.node.empty() && !p.fetched) return false;
    }
    return true;
  }
  // Whether `node` (non-empty) has no update of `round` in flight any more.
  bool NodeDone(uint64_t round, const std::string& node) const {
    if (node.empty()) return false;
    for (const auto& [id, t] : tickets) {
      if (t.round == round && !t.acked && t.node == node) return false;
    }
    return true;
  }
  std::vector<std::vector<float>> spare_sums;  // fetched partial sums' buffers, for reuse
  double remote_retry_at = 0;  // Elapsed() when a failed partial-sum fetch is tried again
  // Per node that folds for this top: updates it acknowledged (counted here), partial sums
  // fetched from it and their bytes, updates un-counted when it was lost (the status shows it).
  struct RemoteStats {
    uint64_t updates = 0, partials = 0, partial_bytes = 0, lost = 0;
  };
  std::map<std::string, RemoteStats, std::less<>> remote_stats;
  std::map<uint64_t, uint64_t> round_of_version;  // committed, checkpoint not yet written
  uint64_t durable_round = 0;  // the newest round whose version's checkpoint is written
  void RoundsDurable(uint64_t version) {
    durable_version = std::max(durable_version, version);
    while (!round_of_version.empty() && round_of_version.begin()->first <= version) {
      durable_round = std::max(durable_round, round_of_version.begin()->second);
      round_of_version.erase(round_of_version.begin());
    }
  }

  bool Compass() const { return scheduler != nullptr; }
  uint64_t PartialKey(uint32_t instance, uint64_t base) const {
    return algo->staleness_at_commit() ? (base << 32) | instance : instance;
  }
  bool Sync() const { return algo->synchronous(); }
  uint64_t version() const { return state.version; }
  uint64_t NewRound() { return open_round++; }
  double Elapsed() const { return elapsed_before + coordinator_internal::Seconds(start); }
  // Synchronous rounds: how many admitted updates close a round. With a deadline the round
  // waits for every expected client and the deadline settles for a quorum (Timers).
  uint32_t Needed() const {
    if (spec.round_deadline_s > 0) return spec.clients;
    return spec.quorum > 0 ? spec.quorum : spec.clients;
  }
  double TotalSamples() const {
    // Clients that have not reported yet count as the mean of those that have.
    if (samples_seen == 0) return 0;
    const double seen = static_cast<double>(samples_seen);
    return static_cast<double>(samples_sum) / seen * std::max<double>(spec.clients, seen);
  }
  // The current version's model bytes cached (a deploy, a restore: nobody else holds the job
  // yet, or its lock is held). A commit writes them without the lock (fl_commit.cc).
  void CacheModel();
  // The current version's weights for the updates trained from it (Δ-based algorithms); the
  // commit copies them without the job's lock and keeps the copy under it (`kept`).
  void KeepVersion(agg::ModelVersion kept = nullptr) {
    if (!store) return;
    if (!kept) kept = std::make_shared<const std::vector<float>>(state.weights);
    // Fails only for a version not newer than the last kept one, which the commits' order
    // rules out; were it to, updates trained from this version would be refused as unknown.
    if (Status st = store->Put(state.version, std::move(kept)); !st.ok()) {
      spdlog::error("fl job {}: keeping version {} for the updates trained from it: {}", spec.name,
                    state.version, st.ToString());
    }
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
  // Gives the job's hold (`slot`) on the pool buffer at `offset` back. It fails only where the
  // job's bookkeeping and the pool disagree (the slot does not hold that buffer, or it was
  // freed already) or the pool's lock died with its holder, never through what a client sent:
  // logged with what the buffer was, and the caller goes on as before (nothing to undo).
  void ReleaseBuffer(uint64_t offset, HolderSlot slot, const char* what) {
    ReleaseOrLog(*pool, offset, slot, what, "fl job {}", spec.name);
  }
  // The checkpoint of `version` is written: the updates it (and every older version) includes
  // go back to the pool, and the log keeps only the acknowledged updates that no written
  // checkpoint includes yet (those of later, still unwritten versions, and those in flight).
  // Under the job's lock: true when the log is to be compacted, its records taken into
  // `*log_bytes` (and UpdateLog::BeginRewrite called); the caller finishes the compaction
  // (UpdateLog::FinishRewrite) once it released the lock. (job_log.cc, as the three below.)
  bool Durable(uint64_t version, std::string* log_bytes);
  // The seqs of the log records that the version in memory includes but no written
  // checkpoint does (state.json's last_commit_seqs: a restart skips them).
  std::vector<uint64_t> UndurableSeqs() const;
  // What the compacted log keeps: the undurable versions' records and the acknowledged
  // tickets' (a round taken for its commit keeps its records in `undurable` from the swap on;
  // until then a crash re-folds them from the old log, which a compaction only replaces once
  // the new one is synced).
  std::string LogBytes() const;
  // Folds the acknowledged updates of `ids` (tickets of `from`, their bytes still in the pool)
  // into the float32 sum at `acc`. No lock: `from` is the caller's.
  size_t Refold(float* acc, const std::vector<uint64_t>& ids,
                const std::map<uint64_t, Ticket>& from) const;
  // spec.aggregation.robust (job_robust.cc): the rule over the round's acknowledged updates
  // (tickets of `from`), in place in the pool, taken as deltas from `weights` (the model they
  // were trained from, version `version`), into `total` as if every update were the rule's
  // result (Σ c_k of them times it), so the algorithm's step is the same. No lock (the commit
  // thread's: `total`, `robust_out`, and the round taken out); RobustVerdicts then keeps, under
  // the job's lock, what the rule made of each update per client and adds each suspect to
  // `suspects` (client id, rule).
  static std::vector<uint64_t> RoundTickets(const Round& round);
  Result<RobustOutcome> RobustMerge(const FlRobustSpec& rule, const Round& round,
                                    const std::map<uint64_t, Ticket>& from,
                                    const std::vector<float>& weights, uint64_t version,
                                    RobustCommitter& committer);
  void RobustVerdicts(const Round& round, const std::map<uint64_t, Ticket>& from,
                      const RobustOutcome& outcome, uint64_t new_version,
                      std::vector<std::pair<std::string, std::string>>* suspects);
  static Json VerdictJson(const RobustVerdict& v);
};

}  // namespace shoal
