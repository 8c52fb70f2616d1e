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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shoal/aggregator/checkpoint_writer.h"
#include "shoal/common/config.h"
#include "shoal/interfaces/function_spec.h"
#include "shoal/interfaces/job_service.h"
#include "shoal/pool/shm_pool.h"
#include "shoal/interfaces/fl_data_path.h"

namespace shoal {

namespace aggregator {
class FoldPool;
}
class RobustCommitter;  // robust_commit.h: spec.aggregation.robust at commit

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
  // The leaf-aggregator functions of the running jobs, for the instance manager.
  std::vector<FunctionSpec> LeafSpecs();

  // JobService
  Status DeployJob(const FlJobSpec& spec) override;
  Status DeleteJob(const std::string& job) override;
  std::vector<std::string> ListJobs() override;
  Result<std::string> JobStatusJson(const std::string& job) override;
  Result<std::string> JobNamespace(const std::string& job) override;
  Result<JoinResult> Join(const std::string& job, const std::string& client_name,
                          const std::string& join_token) override;
  Result<TaskResult> Task(const std::string& job, const std::string& client_id,
                          const std::string& token) override;
  Result<ModelBlob> Model(const std::string& job, std::optional<uint64_t> version) override;
  Status Evaluate(const std::string& job, const EvalReport& report) override;

  // FlDataPath
  std::string LeafFunction(std::string_view job) override;
  Result<FlAdmission> Admit(std::string_view job, BufferPool& pool,
                            std::span<const std::byte> body, uint64_t buffer) override;
  Result<uint64_t> PartialFor(uint64_t ticket, uint32_t instance) override;
  void Completed(uint64_t ticket, int http_status, bool leaf_answered) override;
  // Called (on a gateway loop) each time a leaf of `job` reports that its GPU fold failed and it
  // folds on the CPU from then on: shoald counts shoal_fl_gpu_fallbacks_total{job}.
  void SetOnGpuFallback(std::function<void(const std::string& job)> f) {
    on_gpu_fallback_ = std::move(f);
  }
  // Called on the commit thread, outside every job lock, once per update that a robust job's
  // rule (spec.aggregation.robust) excluded or down-weighted: shoald counts
  // shoal_fl_suspect_updates_total{job,client,rule}.
  void SetOnSuspect(
      std::function<void(const std::string& job, const std::string& client, const std::string& rule)> f) {
    on_suspect_ = std::move(f);
  }

  struct JobState;  // fl_coordinator.cc

 private:
  std::shared_ptr<JobState> Find(const std::string& job);
  void CommitLoop();
  // Queues the job's checkpoint (state.json; with_model also the model and the optimizer state:
  // a new version, large, so not on every join or evaluation) for the checkpoint writer and
  // returns its ticket (CheckpointWriter::Wait). Called with the job's lock held.
  uint64_t Persist(const std::shared_ptr<JobState>& job, bool with_model = true);
  void Timers();
  void Enqueue(std::shared_ptr<JobState> job);

  const NodeConfig& config_;
  std::function<void()> on_change_;
  std::function<void(const std::string&, uint64_t)> on_commit_;
  std::function<void(const std::string&)> on_gpu_fallback_;
  std::function<void(const std::string&, const std::string&, const std::string&)> on_suspect_;
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
  std::unique_ptr<RobustCommitter> robust_;           // the robust jobs' rules, on the commit thread
};

}  // namespace shoal
