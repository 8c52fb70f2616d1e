// FlCoordinator's commits (its own thread): every closed round whose updates have all answered
// is merged (the leaves' partial sums, other nodes' fetched ones, or a robust rule over the
// updates), the algorithm's step applied, the model's bytes cached and the checkpoint queued;
// the timers (FedCompass T_l, FedFix ticks, round deadlines); the warm buffers prepared behind.
#include <cmath>

#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/kernels/fold_pool.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own
namespace coordinator_internal {

// Off the commit's critical path (the job's lock is not held while the pages are touched): a
// warm blob for the next version's model bytes, so that CacheModel neither allocates nor
// faults in 11 k fresh pages per ResNet-sized commit.
void PrepareSpareModel(FlCoordinator::JobState& job) {
  size_t bytes;
  {
    std::lock_guard jl(job.mu);
    bytes = job.models.SpareWanted();
    if (job.deleted || bytes == 0) return;
  }
  auto blob = std::make_shared<std::string>();
  blob->resize(bytes + 64);  // zero-filled: every page touched (the next header may be longer)
  blob->resize(bytes);       // the capacity stays
  std::lock_guard jl(job.mu);
  if (job.models.SpareWanted() != 0) job.models.AddSpare(std::move(blob));
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
      for (uint64_t off : reuse) job.ReleaseBuffer(off, kShoaldSlot, "a deleted job's partial sum");
      return;
    }
    while (job.warm_partials.size() > job.WarmPartialsWanted()) {  // a job that is done
      job.ReleaseBuffer(job.warm_partials.back(), kShoaldSlot, "a done job's warm partial sum");
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
      job.ReleaseBuffer(off, kShoaldSlot, "a partial sum no longer wanted warm");
    } else {
      job.warm_partials.push_back(off);
    }
  }
}

}  // namespace coordinator_internal

void FlCoordinator::JobState::CacheModel() {
  std::shared_ptr<std::string> blob = models.Take();
  if (Status st = WriteModelSafetensors(mspec, spec.name, state.weights, state.version, blob.get(),
                                        nullptr);
      !st.ok()) {
    spdlog::error("fl job {}: model bytes: {}", spec.name, st.ToString());
    return;
  }
  models.Keep(state.version, std::move(blob));
}

// ---- commits --------------------------------------------------------------------------------

namespace {
const agg::VersionStore& NoVersions() {
  static const agg::VersionStore empty(0);
  return empty;
}
}  // namespace

// One round's commit, taken out of the job (TakeRound, under its lock), merged and stepped with
// no lock (RunCommit), swapped back in (SwapIn, under the lock). Between the first and the last
// the commit thread owns what it took: the round and its tickets, the weights and the optimizer
// state (the job's vectors, swapped out: nothing else reads them; the version stays the job's),
// the job's `total`, `robust_out` and a model blob.
struct FlCoordinator::CommitWork {
  std::string name;  // the job's
  uint64_t round_id = 0;
  JobState::Round round;
  std::map<uint64_t, JobState::Ticket> tickets;  // the round's acknowledged updates
  uint64_t version = 0;                          // before the commit
  agg::ModelState state;                         // the job's, swapped out
  std::shared_ptr<std::string> blob;             // for the new version's bytes
  BufferPool* pool = nullptr;
  bool robust = false;
  FlRobustSpec robust_spec;
  DpCommit dp;  // spec.privacy.dp (dp_commit.h)
  // spec.privacy.secureAggregation (fl_secagg.cc): the masks to remove, planned under the lock.
  std::optional<secagg::SecAggSession::UnmaskPlan> secagg;
  std::string secagg_sum_sha256;
  // Results.
  Status merged;
  bool committed = false;
  std::optional<RobustOutcome> outcome;
  agg::ModelVersion kept;  // the new weights for the version store (Δ-based algorithms)
  Optimizer optimizer;     // the new optimizer state's checkpoint bytes
  size_t rebuilds = 0;
  size_t merged_partials = 0;
  double merge_ms = 0, step_ms = 0, cache_ms = 0, run_ms = 0;
};

bool FlCoordinator::TakeRound(JobState& job, CommitWork* w) {
  // Every closed round whose updates have all answered, oldest first.
  for (auto rit = job.rounds.begin(); rit != job.rounds.end();) {
    JobState::Round& round = rit->second;
    JobState::Round* partner = round.merge_round != 0 && job.rounds.count(round.merge_round)
                                   ? &job.rounds[round.merge_round]
                                   : nullptr;
    if (round.closed && round.inflight == 0 && !job.RemoteReady(round)) {
      // Another node's partial sum did not come (FetchRemotePartials logged why): the round
      // waits, and is tried again shortly (Timers), or once that node's loss re-opens it.
      job.remote_retry_at = job.Elapsed() + 0.2;
      return false;
    }
    if (round.closed && round.inflight == 0 && job.secagg && !job.SecAggReady(rit->first, round)) {
      return false;  // its protocol round still collects unmask shares (fl_secagg.cc)
    }
    if (!round.closed || round.inflight != 0 || round.merged ||
        (partner != nullptr && partner->inflight != 0)) {
      if (!job.Compass() && !round.closed) return false;
      ++rit;
      continue;
    }
    if (job.ResendInsteadOfRebuild(rit->first, round) && !round.closed) return false;
    if (partner != nullptr) {
      // One commit for the group and the general buffer: move the buffer's partial sums in.
      for (auto& [key, p] : partner->partials) round.partials[key | (uint64_t{1} << 63)] = p;
      round.acked += partner->acked;
      job.rounds.erase(round.merge_round);
      round.merge_round = 0;
    }
    w->name = job.spec.name;
    w->round_id = rit->first;
    w->round = std::move(round);
    job.rounds.erase(rit);
    for (const auto& [key, p] : w->round.partials) {
      for (uint64_t tid : p.tickets) {
        auto it = job.tickets.find(tid);
        if (it == job.tickets.end()) continue;
        w->tickets.emplace(tid, std::move(it->second));
        job.tickets.erase(it);
      }
    }
    w->version = job.version();
    w->state.version = job.state.version;
    w->state.weights.swap(job.state.weights);
    w->state.momentum.swap(job.state.momentum);
    w->state.second_moment.swap(job.state.second_moment);
    if (w->round.acked > 0) w->blob = job.models.Take();
    w->pool = job.pool;
    w->robust = job.Robust();
    w->robust_spec = job.spec.robust;
    if (job.dp) w->dp = DpTake(job, JobState::RoundTickets(w->round).size());
    if (job.secagg && w->round.acked > 0) {
      auto plan = job.secagg->PlanUnmask(w->round_id);
      if (plan.ok()) {
        w->secagg = std::move(*plan);
      } else {
        w->merged = plan.status();
      }
    }
    job.committing_round = w->round_id;
    return true;
  }
  return false;
}

void FlCoordinator::RunCommit(JobState& job, CommitWork* w) {
  const auto t0 = Clock::now();
  const size_t n = job.mspec.num_params();
  JobState::Round& round = w->round;
  if (round.acked > 0 && w->dp.enabled) {
    // Clipped, noised once on the total, accounted at SwapIn (dp_commit.h); a budget stop
    // commits nothing.
    std::vector<std::span<const std::byte>> bodies;
    double c = 0;
    for (uint64_t tid : JobState::RoundTickets(round)) {
      bodies.push_back(ReadPayload(w->pool->Data(w->tickets.at(tid).buffer)).body);
      c += w->tickets.at(tid).coefficient;
    }
    w->merged = DpMerge(job, bodies, c, w->state.weights, w->version, *robust_, &w->dp);
    w->merge_ms = Seconds(t0) * 1e3;
  } else if (round.acked > 0 && w->robust) {
    // The rule over the round's updates in the pool (robust_commit.h), then the step.
    auto outcome =
        job.RobustMerge(w->robust_spec, round, w->tickets, w->state.weights, w->version, *robust_);
    if (outcome.ok()) {
      w->outcome = std::move(*outcome);
    } else {
      w->merged = outcome.status();
    }
    w->merge_ms = Seconds(t0) * 1e3;
  } else if (round.acked > 0 && job.secagg) {
    // The masked u32 sums added, unmasked once, decoded (fl_secagg.cc).
    if (w->secagg) {
      w->merged = job.SecAggTotal(*w->secagg, round, w->tickets, w->pool, merge_pool_.get(),
                                  &w->secagg_sum_sha256);
    }
    w->merge_ms = Seconds(t0) * 1e3;
  } else if (round.acked > 0) {
    if (job.PartialSums()) job.CheckpointRoundPartials(w->round_id, round, w->tickets);
    // The top of the hierarchy: add the leaves' partial sums (in one pass over them, the total
    // written once), then the algorithm's step.
    std::vector<std::vector<std::pair<uint64_t, double>>> folded(round.partials.size());
    std::vector<agg::PartialSum::FoldedSum> sums;
    sums.reserve(round.partials.size());
    for (auto& [inst, p] : round.partials) {
      if (p.rebuild && p.node.empty()) {
        // No leaf writes it now (every update of the round has answered): from scratch, into a
        // partial sum zeroed here where it had none (its leaf folded into the sink: no warm
        // partial sum was ready; not a rebuild the status counts).
        const bool sunk = p.offset == 0;
        if (sunk) {
          auto fresh = ZeroedPartial(*w->pool, n * sizeof(float));
          if (!fresh.ok()) {
            w->merged = fresh.status();
            break;
          }
          p.offset = *fresh;
        } else {
          float* acc = reinterpret_cast<float*>(w->pool->Data(p.offset).data());
          std::fill(acc, acc + n, 0.0f);
        }
        float* acc = reinterpret_cast<float*>(w->pool->Data(p.offset).data());
        const size_t refolded = job.Refold(acc, p.tickets, w->tickets);
        p.rebuild = false;
        if (!sunk) {
          ++w->rebuilds;
          spdlog::warn("fl job {}: partial sum rebuilt from {} acknowledged update(s)", w->name,
                       refolded);
        }
      }
      std::vector<std::pair<uint64_t, double>>& f = folded[sums.size()];
      for (uint64_t tid : p.tickets) {
        const JobState::Ticket& t = w->tickets.at(tid);
        f.emplace_back(t.base_version, t.coefficient);
      }
      // Another node's one partial sum of the round (fetched), or a leaf's here.
      const auto* leaf = !p.node.empty()
                             ? p.sum.data()
                             : reinterpret_cast<const float*>(w->pool->Data(p.offset).data());
      const double scale = job.algo->staleness_at_commit()
                               ? job.algo->CommitScale(w->version - std::min(p.base, w->version))
                               : 1.0;
      sums.push_back({{leaf, n}, f, scale});
    }
    w->merged_partials = sums.size();
    if (w->merged.ok()) {
      if (Status st = job.total.ResetToFolded(sums, merge_pool_.get()); !st.ok()) {
        spdlog::error("fl job {}: {}", w->name, st.ToString());
      }
    }
    w->merge_ms = Seconds(t0) * 1e3;
  }
  if (round.acked > 0) {
    Status st = w->merged.ok()
                    ? job.algo->Commit(job.total, job.store ? *job.store : NoVersions(), w->state)
                    : w->merged;
    if (!st.ok()) {
      spdlog::error("fl job {}: commit of {} update(s) failed: {}", w->name, round.acked,
                    st.ToString());
    } else {
      w->committed = true;
      w->step_ms = Seconds(t0) * 1e3 - w->merge_ms;
      if (job.store) w->kept = std::make_shared<const std::vector<float>>(w->state.weights);
      if (Status ms = WriteModelSafetensors(job.mspec, w->name, w->state.weights, w->state.version,
                                            w->blob.get(), merge_pool_.get());
          !ms.ok()) {
        spdlog::error("fl job {}: model bytes: {}", w->name, ms.ToString());
        w->blob.reset();
      }
      if (!w->state.momentum.empty() || !w->state.second_moment.empty()) {
        w->optimizer = OptimizerBytes(w->state);
      }
      w->cache_ms = Seconds(t0) * 1e3 - w->merge_ms - w->step_ms;
    }
  }
  w->run_ms = Seconds(t0) * 1e3;
}

void FlCoordinator::SwapIn(const std::shared_ptr<JobState>& jp, CommitWork* w,
                           std::vector<uint64_t>* reuse, std::vector<uint64_t>* committed_versions,
                           std::vector<std::pair<std::string, std::string>>* suspects) {
  JobState& job = *jp;
  JobState::Round& round = w->round;
  job.state.weights.swap(w->state.weights);
  job.state.momentum.swap(w->state.momentum);
  job.state.second_moment.swap(w->state.second_moment);
  job.committing_round = 0;
  if (job.deleted) {
    // RemoveJob gave back what the job held; what the commit took is given back here.
    for (const auto& [tid, t] : w->tickets) {
      if (t.node.empty()) job.ReleaseBuffer(t.buffer, kCoordinatorSlot, "a deleted job's update");
    }
    for (const auto& [key, p] : round.partials) {
      if (p.offset != 0) job.ReleaseBuffer(p.offset, kShoaldSlot, "a deleted job's partial sum");
    }
    return;
  }
  job.partial_rebuilds += w->rebuilds;
  if (w->secagg) job.secagg->Finish(*w->secagg, w->merged, w->secagg_sum_sha256);
  if (w->outcome) job.RobustVerdicts(round, w->tickets, *w->outcome, w->version + 1, suspects);
  if (w->dp.enabled) {
    std::vector<std::string> clients;
    for (uint64_t tid : JobState::RoundTickets(round)) clients.push_back(w->tickets.at(tid).client);
    DpSwapIn(job, w->dp, clients, w->committed);
  }
  if (w->committed) {
    job.state.version = w->state.version;
    job.KeepVersion(std::move(w->kept));
    if (w->blob) job.models.Keep(job.version(), std::move(w->blob));
    job.AddVersion({job.version(), std::nullopt, std::nullopt, round.acked, job.Elapsed()});
    if (job.spec.rounds > 0 && job.version() >= job.spec.rounds) job.done = true;
  } else if (w->blob) {
    job.models.AddSpare(std::move(w->blob));
  }
  // The partial sums go back to the pool now; the updates once the checkpoint naming this
  // version is written (until then a crash re-folds them from the log: Durable).
  JobState::Undurable u;
  u.version = job.version();
  for (auto& [inst, p] : round.partials) {
    for (uint64_t tid : p.tickets) {
      auto it = w->tickets.find(tid);
      if (it == w->tickets.end()) continue;
      const JobState::Ticket& t = it->second;
      if (t.node.empty()) {  // another node's update is held (and logged) there
        if (t.buffer != 0) u.buffers.push_back(t.buffer);  // partialSums: released when folded
        u.records.push_back(RecordOf(t));
      }
    }
    if (!p.node.empty() && job.spare_sums.size() < 4) {
      job.spare_sums.push_back(std::move(p.sum));  // warm pages for the next fetch
    }
    if (p.offset == 0) continue;  // a robust job's (and other nodes') have none
    // Its pages are warm: zeroed again behind the commit for the next round's leaves.
    if (job.warm_partials.size() + reuse->size() < job.WarmPartialsWanted()) {
      reuse->push_back(p.offset);
    } else {
      job.ReleaseBuffer(p.offset, kShoaldSlot, "a committed round's partial sum");
    }
  }
  if (!u.records.empty()) job.undurable.push_back(std::move(u));
  if (w->committed) job.round_of_version[job.version()] = w->round_id;
  for (const auto& a : round.assignments) job.SetTask(a);
  if (job.Sync() && job.spec.round_deadline_s > 0) {
    job.round_deadline = job.Elapsed() + job.spec.round_deadline_s;
  }
  const auto t0 = Clock::now();
  Persist(jp, /*with_model=*/true, &w->optimizer);
  if (w->committed) {
    committed_versions->push_back(job.version());
    spdlog::info(
        "fl job {}: version {} committed from {} update(s) over {} leaf partial sum(s) in "
        "{:.2f} ms (top merge {:.1f}, {} step {:.1f}, model bytes {:.1f}, checkpoint queued "
        "{:.1f}){}",
        w->name, job.version(), round.acked, job.total.count() == 0 ? 0 : w->merged_partials,
        w->run_ms + Seconds(t0) * 1e3, w->merge_ms, job.spec.algorithm, w->step_ms, w->cache_ms,
        Seconds(t0) * 1e3, job.done ? " (last)" : "");
  }
}

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
    // Other nodes' partial sums of the rounds that are due, fetched without the job's lock
    // (and their admissions that no answer ever reached dropped: ProbeRemoteAdmissions).
    ProbeRemoteAdmissions(job);
    FetchRemotePartials(job);
    std::vector<uint64_t> reuse;  // partial sums of committed rounds, to zero for the next
    std::vector<uint64_t> committed_versions;  // for on_commit_, once the job's lock is released
    std::vector<std::pair<std::string, std::string>> suspects;  // for on_suspect_, likewise
    for (;;) {
      CommitWork w;
      {
        std::lock_guard jl(job->mu);
        if (job->deleted || !TakeRound(*job, &w)) break;
      }
      if (test_hooks_.commit) test_hooks_.commit(w.name);
      RunCommit(*job, &w);
      {
        std::lock_guard jl(job->mu);
        SwapIn(job, &w, &reuse, &committed_versions, &suspects);
      }
      (void)job->FlushClientLog();  // logged
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
      if (job->deleted) continue;
      const double now = job->Elapsed();
      if (job->remote_retry_at > 0 && now >= job->remote_retry_at) {
        job->remote_retry_at = 0;
        due = true;
      }
      if (job->done) {
        if (due) Enqueue(job);
        continue;
      }
      if (job->secagg) {
        const auto t = job->secagg->OnTimer(now);
        if (t.close_input && job->CloseSecAggInput(t.coord_round)) due = true;
        if (t.commit_due) due = true;
      }
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
          spdlog::info(
              "fl job {}: round {} reached its deadline with {} of {} update(s) "
              "(quorum {}): committing",
              job->spec.name, job->open_round, have, job->spec.clients, quorum);
          it->second.closed = true;
          ++job->open_round;
          due = true;
        } else {
          // Below quorum: the round stays open for another deadline (no update is dropped).
          spdlog::warn(
              "fl job {}: round {} missed its deadline with {} of quorum {} "
              "update(s): extended by {} s",
              job->spec.name, job->open_round, have, quorum, job->spec.round_deadline_s);
        }
        job->round_deadline = now + job->spec.round_deadline_s;
      }
    }
    if (due) Enqueue(job);
  }
}

}  // namespace shoal
