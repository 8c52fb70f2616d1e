// FlCoordinator's commits (its own thread): every closed round whose updates have all answered
// is merged (the leaves' partial sums, other nodes' fetched ones, or a robust rule over the
// updates), the algorithm's step applied, the model's bytes cached and the checkpoint queued;
// the timers (FedCompass T_l, FedFix ticks, round deadlines); the warm buffers prepared behind.
#include <cmath>

#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/kernels/fold_pool.h"

namespace shoal {
namespace coordinator_internal {

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

// ---- commits --------------------------------------------------------------------------------

namespace {
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
    // Other nodes' partial sums of the rounds that are due, fetched without the job's lock
    // (and their admissions that no answer ever reached dropped: ProbeRemoteAdmissions).
    ProbeRemoteAdmissions(job);
    FetchRemotePartials(job);
    std::vector<uint64_t> reuse;  // partial sums of committed rounds, to zero for the next
    std::vector<uint64_t> committed_versions;  // for on_commit_, once the job's lock is released
    std::vector<std::pair<std::string, std::string>> suspects;  // for on_suspect_, likewise
    {
      std::lock_guard jl(job->mu);
      if (job->deleted) continue;
      // Commit every closed round whose updates have all answered, oldest first.
      for (auto rit = job->rounds.begin(); rit != job->rounds.end();) {
        JobState::Round& round = rit->second;
        JobState::Round* partner = round.merge_round != 0 && job->rounds.count(round.merge_round)
                                       ? &job->rounds[round.merge_round]
                                       : nullptr;
        if (round.closed && round.inflight == 0 && !job->RemoteReady(round)) {
          // Another node's partial sum did not come (FetchRemotePartials logged why): the round
          // waits, and is tried again shortly (Timers), or once that node's loss re-opens it.
          job->remote_retry_at = job->Elapsed() + 0.2;
          break;
        }
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
          // The top of the hierarchy: add the leaves' partial sums (in one pass over them, the
          // total written once), then the algorithm's step.
          std::vector<std::vector<std::pair<uint64_t, double>>> folded(round.partials.size());
          std::vector<agg::PartialSum::FoldedSum> sums;
          sums.reserve(round.partials.size());
          for (auto& [inst, p] : round.partials) {
            if (p.rebuild && p.node.empty()) {
              // No leaf writes it now (every update of the round has answered): from scratch.
              float* acc = reinterpret_cast<float*>(job->pool->Data(p.offset).data());
              std::fill(acc, acc + n, 0.0f);
              const size_t refolded = job->Refold(acc, p.tickets);
              p.rebuild = false;
              ++job->partial_rebuilds;
              spdlog::warn("fl job {}: partial sum rebuilt from {} acknowledged update(s)",
                           job->spec.name, refolded);
            }
            std::vector<std::pair<uint64_t, double>>& f = folded[sums.size()];
            for (uint64_t tid : p.tickets) {
              const JobState::Ticket& t = job->tickets[tid];
              f.emplace_back(t.base_version, t.coefficient);
            }
            // Another node's one partial sum of the round (fetched), or a leaf's here.
            const auto* leaf =
                !p.node.empty() ? p.sum.data()
                                : reinterpret_cast<const float*>(job->pool->Data(p.offset).data());
            const double scale =
                job->algo->staleness_at_commit()
                    ? job->algo->CommitScale(job->version() - std::min(p.base, job->version()))
                    : 1.0;
            sums.push_back({{leaf, n}, f, scale});
          }
          if (Status st = job->total.ResetToFolded(sums, merge_pool_.get()); !st.ok()) {
            spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
          }
          merge_ms = Seconds(t0) * 1e3;
        }
        if (round.acked > 0) {
          Status st = merged.ok()
                          ? job->algo->Commit(job->total, job->store ? *job->store : NoVersions(),
                                              job->state)
                          : merged;
          if (!st.ok()) {
            spdlog::error("fl job {}: commit of {} update(s) failed: {}", job->spec.name,
                          round.acked, st.ToString());
          } else {
            committed = true;
            step_ms = Seconds(t0) * 1e3 - merge_ms;
            job->KeepVersion();
            job->CacheModel(merge_pool_.get());
            cache_ms = Seconds(t0) * 1e3 - merge_ms - step_ms;
            job->AddVersion(
                {job->version(), std::nullopt, std::nullopt, round.acked, job->Elapsed()});
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
            if (t.node.empty()) {  // another node's update is held (and logged) there
              u.buffers.push_back(t.buffer);
              u.records.push_back(RecordOf(t));
            }
            job->tickets.erase(tid);
          }
          // Its pages are warm: zeroed again behind the commit for the next round's leaves.
          if (!p.node.empty() && job->spare_sums.size() < 4) {
            job->spare_sums.push_back(std::move(p.sum));  // warm pages for the next fetch
          }
          if (p.offset == 0) continue;  // a robust job's (and other nodes') have none
          if (job->warm_partials.size() + reuse.size() < job->WarmPartialsWanted()) {
            reuse.push_back(p.offset);
          } else {
            job->ReleaseBuffer(p.offset, kShoaldSlot, "a committed round's partial sum");
          }
        }
        if (!u.records.empty()) job->undurable.push_back(std::move(u));
        if (committed) job->round_of_version[job->version()] = rit->first;
        for (const auto& a : round.assignments) job->SetTask(a);
        rit = job->rounds.erase(rit);
        if (job->Sync() && job->spec.round_deadline_s > 0) {
          job->round_deadline = job->Elapsed() + job->spec.round_deadline_s;
        }
        const double before_persist_ms = Seconds(t0) * 1e3;
        Persist(job);
        if (committed) {
          committed_versions.push_back(job->version());
          spdlog::info(
              "fl job {}: version {} committed from {} update(s) over {} leaf partial "
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
