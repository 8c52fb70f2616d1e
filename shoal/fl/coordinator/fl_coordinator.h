// The FL job coordinator: one per node (embedded in shoald), one JobState per FL job. It
// admits updates (client, token, staleness), names the partial sum each leaf aggregator folds
// into, counts an update once its leaf has folded it, and commits a new global model when the
// algorithm's condition holds: it adds the leaves' partial sums (the top of the hierarchy),
// applies the final step, serves the new model to clients and to inference at once (the bytes
// it holds, shared, never copied per download), and checkpoints it behind (CheckpointWriter).
//
// The math and the FedCompass scheduling are shoal_fl_algorithms' (AggregationAlgorithm,
// PartialSum, VersionStore, ModelState, FedCompassScheduler); this file decides when, holds the
// buffers and keeps the job durable: an update is written to the job's update log before its
// 202, every commit checkpoints the model, the optimizer and the scheduler, and a restarted
// shoald re-folds the logged updates that the last checkpoint does not include, exactly once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/fl/coordinator/checkpoint_writer.h"
#include "shoal/interfaces/fl_data_path.h"
#include "shoal/interfaces/function_spec.h"
#include "shoal/interfaces/job_service.h"

namespace shoal {

namespace aggregator {
class FoldPool;
}
namespace v1 {
class UpdateHeader;
}
class RobustCommitter;  // robust_commit.h: spec.aggregation.robust at commit
class FlMembers;        // fl_members.h: the jobs this node folds for a top on another node

// Cluster mode, LIFL's hierarchy across nodes (fl_cluster_top.cc, fl_members.cc): what a node
// that folds a job's updates for the job's top on another node needs from that top. shoald's
// cluster part (cmd/shoald/cluster_fl.*) implements it over the nodes' FL peer links.
class FlTopLink {
 public:
  struct Admission {
    uint64_t ticket = 0;  // the top's ticket
    uint64_t round = 0;   // the top's round the update counts toward
    double coefficient = 0;
    uint64_t durable_round = 0;  // rounds up to this one are committed and checkpointed
  };
  virtual ~FlTopLink() = default;
  // The small admit request: the update's header (prefix + UpdateHeader, no tensors) and the
  // request's bearer token; the top authenticates and admits it or says why not (the error is
  // the client's, as a local Admit's). One short round trip (on an admit thread). `key` is this
  // node's name for the admission (never reused): the top keeps it with its ticket and may ask
  // later whether this node holds it (FlMembers::Unknown), since an answer that never arrived
  // here (a timeout) leaves the top with an admission this node knows nothing of.
  virtual Result<Admission> Admit(const std::string& top, const std::string& job,
                                  std::string_view bearer, std::span<const std::byte> head,
                                  uint64_t key) = 0;
  // The update of the top's `ticket` is folded and durable here (ok) or failed (it does not
  // count, and its client may send it again). Never blocks: delivered in order, retried.
  virtual void Report(const std::string& top, const std::string& job, uint64_t ticket, bool ok) = 0;
};

// A job's spec as JSON (state.json's "spec"), and back: how a top hands it to the nodes that
// fold its updates.
std::string FlJobSpecJson(const FlJobSpec& spec);
Result<FlJobSpec> FlJobSpecFromJson(std::string_view text);

class FlCoordinator final : public JobService, public FlDataPath {
 public:
  explicit FlCoordinator(const NodeConfig& config);
  ~FlCoordinator() override;

  // Reloads the jobs checkpointed under <state_dir>/jobs (their latest committed version).
  Status Restore();
  // After a restart, once the pools exist: re-folds every update the log says was acknowledged
  // but is not in the last checkpoint (its bytes are still in the job's pool, held by
  // kCoordinatorSlot), releases the buffers nobody acknowledged, and queues the commits that
  // are due. `pool_for` gives (creating or taking over) the tenant's pool.
  Status Recover(const std::function<Result<SharedPool*>(const std::string&)>& pool_for);
  // Called when the set of jobs changes (the instance manager re-reads LeafSpecs()).
  void SetOnChange(std::function<void()> on_change) { on_change_ = std::move(on_change); }
  // Called on the commit thread, outside every job lock, after each version is committed (the
  // control listener's event streams send it to the console). Before the first commit.
  void SetOnCommit(std::function<void(const std::string& job, uint64_t version)> on_commit) {
    on_commit_ = std::move(on_commit);
  }
  // Called outside every job lock when a job's status changed other than by a commit: an
  // evaluation (its accuracy, the best one, and the job done on reaching its target). Cluster
  // mode publishes the job's state to etcd on it (with SetOnCommit's), so that the cluster's
  // view converges to the top's without waiting for the periodic republish.
  void SetOnStatus(std::function<void(const std::string& job)> on_status) {
    on_status_ = std::move(on_status);
  }
  // The leaf-aggregator functions of the running jobs, for the instance manager.
  std::vector<FunctionSpec> LeafSpecs();
  // /metrics' lines for the DP jobs (spec.privacy.dp; dp_commit.cc): shoal_fl_dp_epsilon{job},
  // shoal_fl_dp_delta{job}, shoal_fl_dp_clip{job} and shoal_fl_dp_budget{job}; empty with none.
  std::string PrivacyMetricsText();

  // JobService
  Status DeployJob(const FlJobSpec& spec) override;
  Status DeleteJob(const std::string& job) override;
  std::vector<std::string> ListJobs() override;
  Result<std::string> JobStatusJson(const std::string& job,
                                    const StatusClientsPage& page = {}) override;
  Result<std::string> JobNamespace(const std::string& job) override;
  Result<JoinResult> Join(const std::string& job, const std::string& client_name,
                          const std::string& join_token) override;
  Result<TaskResult> Task(const std::string& job, const std::string& client_id,
                          const std::string& token) override;
  Result<ModelBlob> Model(const std::string& job, std::optional<uint64_t> version) override;
  Status Evaluate(const std::string& job, const EvalReport& report) override;
  // spec.privacy.secureAggregation's routes (fl_secagg.cc).
  Result<std::string> SecureAggregation(const std::string& job, const SecAggRequest& req) override;

  // FlDataPath
  std::string LeafFunction(std::string_view job) override;
  Result<FlAdmission> Admit(std::string_view job, BufferPool& pool, std::span<const std::byte> body,
                            uint64_t buffer) override;
  Result<uint64_t> PartialFor(uint64_t ticket, uint32_t instance) override;
  void Completed(uint64_t ticket, int http_status, bool leaf_answered) override;
  // Marks the ticket's partial sum for a rebuild at commit (the status's `partial_rebuilds`
  // counts those done), logged.
  void PartialChanged(uint64_t ticket) override;
  // Called (on a gateway loop) each time a leaf of `job` reports that its GPU fold failed and it
  // folds on the CPU from then on: shoald counts shoal_fl_gpu_fallbacks_total{job}.
  void SetOnGpuFallback(std::function<void(const std::string& job)> f) {
    on_gpu_fallback_ = std::move(f);
  }
  // Called on the commit thread, outside every job lock, once per update that a robust job's
  // rule (spec.aggregation.robust) excluded or down-weighted: shoald counts
  // shoal_fl_suspect_updates_total{job,client,rule}.
  void SetOnSuspect(std::function<void(const std::string& job, const std::string& client,
                                       const std::string& rule)>
                        f) {
    on_suspect_ = std::move(f);
  }

  // Tests only: `commit` is called on the commit thread once a round is taken for its commit,
  // before its merge, and `log_compaction` on the checkpoint writer's thread before a compacted
  // update log replaces the old one, each with the job's name and no job lock held. A test
  // blocks them on a latch to show that the gateway's calls wait for neither.
  struct TestHooks {
    std::function<void(const std::string& job)> commit;
    std::function<void(const std::string& job)> log_compaction;
  };
  void SetTestHooks(TestHooks hooks) { test_hooks_ = std::move(hooks); }

  // ---- cluster mode: this node as a job's top (fl_cluster_top.cc) ----
  struct HeaderAdmission {
    uint64_t ticket = 0;
    uint64_t round = 0;
    double coefficient = 0;
  };
  // Whether another node may fold the job's updates for this top: jobs whose partial sums
  // merge as they are (not a robust rule over every update, nor staleness taken at commit).
  bool FoldsElsewhere(const std::string& job);
  // The spec of a job this node is the top of, for the nodes that fold its updates.
  Result<FlJobSpec> Spec(const std::string& job);
  // An update received by `node`: admitted on its header alone (its bytes stay there).
  Result<FlTopLink::Admission> AdmitRemote(const std::string& job, const std::string& node,
                                           std::span<const std::byte> head, uint64_t key);
  // `node` folded the update of `ticket` and made it durable there (ok), or it failed.
  void CompletedRemote(const std::string& job, uint64_t ticket, bool ok);
  // `node` is lost (its lease expired): the updates it admitted whose partial sum is not here
  // no longer count, and their clients are told to send them again (their next task trains).
  void NodeLost(const std::string& node);
  // Fetches `node`'s partial sum of `round` over exactly `tickets` into `sum` (float32).
  using PartialFetch =
      std::function<Status(const std::string& node, const std::string& job, uint64_t round,
                           const std::vector<uint64_t>& tickets, std::vector<float>* sum)>;
  void SetPartialFetch(PartialFetch fetch);
  // Asks `node` which of `keys` (its names for admissions this top made, FlTopLink::Admit) it
  // neither holds nor is still admitting: those updates will never be folded there.
  using AdmissionProbe = std::function<Result<std::vector<uint64_t>>(
      const std::string& node, const std::string& job, const std::vector<uint64_t>& keys)>;
  void SetAdmissionProbe(AdmissionProbe probe);
  // The job's top was lost: this node becomes its top, resuming from its last checkpoint in
  // the shared checkpoint_dir. Updates acknowledged but not in that checkpoint (in the lost
  // node's pool, or folded here for it) no longer count: their clients' next task trains.
  Status TakeOver(const std::string& job);
  // Stops running `job` on this node as DeleteJob does, but keeps its checkpoint (in the shared
  // checkpoint_dir): the job was moved to another node, which resumes it from there.
  Status DropJob(const std::string& job);

  // ---- cluster mode: this node folding for tops on other nodes (fl_members.cc) ----
  FlMembers& members() { return *members_; }
  // Folds the job's updates that enter this node for its top on node `top` (its leaves start
  // here); StopFolding ends that (the top deleted it, or is gone).
  Status FoldFor(const FlJobSpec& spec, const std::string& top);
  void StopFolding(const std::string& job);
  void SetTopLink(FlTopLink* link);
  // FlDataPath
  bool FoldsForOtherNode(std::string_view job) override;
  Result<FlAdmission> AdmitForTop(std::string_view job, BufferPool& pool,
                                  std::span<const std::byte> body, uint64_t buffer,
                                  std::string_view bearer) override;
  void AdmitForTopAsync(std::string_view job, BufferPool& pool, std::span<const std::byte> body,
                        uint64_t buffer, std::string_view bearer, AdmitDone done) override;
  Status HoldUpdate(uint64_t ticket, BufferPool& pool, uint64_t buffer) override;

  struct JobState;  // fl_coordinator.cc

 private:
  std::shared_ptr<JobState> Find(const std::string& job);
  void CommitLoop();
  // Queues the job's checkpoint (state.json; with_model also the model and the optimizer state:
  // a new version, large, so not on every join or evaluation) for the checkpoint writer and
  // returns its ticket (CheckpointWriter::Wait). Called with the job's lock held; `optimizer`:
  // the optimizer state's bytes the commit made without it (else copied here). The clients'
  // changed figures are queued: the caller writes them (JobState::FlushClientLog) once it
  // released the lock.
  using Optimizer = std::shared_ptr<const std::vector<uint8_t>>;
  uint64_t Persist(const std::shared_ptr<JobState>& job, bool with_model = true,
                   const Optimizer* optimizer = nullptr);
  // The commit of one round in three steps (fl_commit.cc): taken out of the job under its lock,
  // merged and stepped without it, swapped back in under it.
  struct CommitWork;
  bool TakeRound(JobState& job, CommitWork* w);
  void RunCommit(JobState& job, CommitWork* w);
  void SwapIn(const std::shared_ptr<JobState>& job, CommitWork* w, std::vector<uint64_t>* reuse,
              std::vector<uint64_t>* committed_versions,
              std::vector<std::pair<std::string, std::string>>* suspects);
  void Timers();
  void Enqueue(std::shared_ptr<JobState> job);
  // Where the jobs' checkpoint directories are: checkpoint_dir, or <state_dir>/jobs.
  std::string JobsRoot() const;
  Status RestoreJob(const std::string& dir, const nlohmann::json& state, bool take_over);
  Status RemoveJob(const std::string& job, bool keep_checkpoint);
  Result<HeaderAdmission> AdmitHeader(const std::shared_ptr<JobState>& job, std::string_view name,
                                      const shoal::v1::UpdateHeader& h, BufferPool* pool,
                                      uint64_t buffer, const std::string& node);
  void FetchRemotePartials(const std::shared_ptr<JobState>& job);
  // Other nodes' admissions that stay unanswered: asks those nodes (after kProbeAfterS, then
  // again as long as they stay so) and un-counts what they never took (their clients, told the
  // admission failed, send again; until then a round would wait for them for good).
  void ProbeRemoteAdmissions(const std::shared_ptr<JobState>& job);
  // Un-counts `node`'s updates of the job that are not merged yet (`only`: just these tickets):
  // their clients' next task trains again.
  void Uncount(const std::shared_ptr<JobState>& job, const std::string& node,
               const std::vector<uint64_t>* only, const char* why);
  TestHooks test_hooks_;
  PartialFetch partial_fetch_;
  AdmissionProbe admission_probe_;
  std::unique_ptr<FlMembers> members_;

  const NodeConfig& config_;
  std::function<void()> on_change_;
  std::function<void(const std::string&, uint64_t)> on_commit_;
  std::function<void(const std::string&)> on_status_;
  std::function<void(const std::string&)> on_gpu_fallback_;
  std::function<void(const std::string&, const std::string&, const std::string&)> on_suspect_;
  // Threads and locks. A gateway loop never waits for a commit, a checkpoint or an fsync:
  // - gateway loops (Admit, PartialFor, Completed, PartialChanged, HoldUpdate): a job's mu,
  //   then mu_; under the job's mu the update log's own lock (one write(), no fsync), commit_mu_
  //   and the pool's. No partial sum is zeroed on a loop (a warm one, or the job's sink) but
  //   for a job's first version, whose pool is known from its first update only.
  // - the commit thread (CommitLoop, Timers): a job's mu only to take a round out (TakeRound:
  //   its tickets, the weights swapped out) and to swap the result in (SwapIn: the version, the
  //   model bytes, the checkpoint queued); the merge, the step, the model's bytes and the
  //   optimizer's copy run with no lock (RunCommit), on the weights nobody else touches until
  //   SwapIn; then the clients' lines are written (JobState::FlushClientLog).
  // - the checkpoint writer's thread: writes and fsyncs with no job lock; its durable callback
  //   takes a job's mu to release the durable updates and take the log's records to keep, and
  //   writes and fsyncs the compacted log after releasing it (UpdateLog).
  // - control threads (deploy, join, task, model, evaluate, status; cluster calls): a job's mu
  //   for bookkeeping only; the clients' lines are written after it is released.
  // Lock order: a job's client_log_mu (never taken under a job's mu), a job's mu, mu_, then the
  // leaf locks (a job's update log, commit_mu_, the checkpoint writer's, the pool's).
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<JobState>, std::less<>> jobs_;
  std::map<uint64_t, std::shared_ptr<JobState>> by_ticket_;
  uint64_t next_ticket_ = 1;
  uint32_t next_leaf_id_ = 4095;

  // Commits run on their own thread: merging partial sums of a large model must not stall a
  // gateway loop.
  std::mutex commit_mu_;
  std::condition_variable commit_cv_;
  std::deque<std::shared_ptr<JobState>> commit_queue_;
  bool stopping_ = false;
  std::thread committer_;

  // Behind the commits: declared after the committer's state, so it is destroyed (its queue
  // written) before the jobs it calls back into.
  std::unique_ptr<CheckpointWriter> writer_;
  std::unique_ptr<aggregator::FoldPool> merge_pool_;  // the top's merge of the leaves' sums
  std::unique_ptr<RobustCommitter> robust_;  // the robust jobs' rules, on the commit thread
};

}  // namespace shoal
