// FlCoordinator's update path (gateway loops): an update is admitted on its header (client,
// token, staleness, round), named the partial sum its leaf folds it into, and counted once the
// leaf answers (logged before its 202), or un-counted so its client may send it again.
#include "shoal/fl/coordinator/fl_members.h"
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/v1/fl.pb.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

// ---- the update path ------------------------------------------------------------------------

Result<FlAdmission> FlCoordinator::Admit(std::string_view name, BufferPool& pool,
                                         std::span<const std::byte> body, uint64_t buffer) {
  auto job = Find(std::string(name));
  if (!job) {
    if (members_->Has(name)) return members_->Admit(name, pool, body, buffer, {});
    return NotFound("FL job '" + std::string(name) + "' not found");
  }
  // Only the header is read here (on a gateway loop); the leaf validates the tensors.
  shoal::v1::UpdateHeader h;
  SHOAL_RETURN_IF_ERROR(model::ParseUpdateHead(body, &h, nullptr));
  auto t = AdmitHeader(job, name, h, &pool, buffer, {});
  if (!t.ok()) return t.status();
  return FlAdmission{t->ticket, static_cast<float>(t->coefficient)};
}

Result<FlCoordinator::HeaderAdmission> FlCoordinator::AdmitHeader(
    const std::shared_ptr<JobState>& job, std::string_view name, const shoal::v1::UpdateHeader& h,
    BufferPool* pool, uint64_t buffer, const std::string& node) {
  std::lock_guard jl(job->mu);
  if (h.job() != name) {
    return InvalidArgument("update is for job '" + h.job().substr(0, 64) + "', not '" +
                           std::string(name) + "'");
  }
  auto cit = job->clients.find(h.client_id());
  if (cit == job->clients.end())
    return NotFound("unknown client '" + h.client_id().substr(0, 64) + "'");
  JobState::Client& client = cit->second;
  if (client.token != h.token())
    return PermissionDenied("bad token for client '" + client.id + "'");
  if (job->done) return AlreadyExists("job '" + std::string(name) + "' is done");
  if (h.num_samples() == 0) return InvalidArgument("num_samples must be > 0");
  const uint64_t version = job->version();
  if (h.base_version() > version) {
    return InvalidArgument("base version " + std::to_string(h.base_version()) +
                           " is newer than the current version " + std::to_string(version));
  }
  const uint64_t staleness = version - h.base_version();
  const bool sync = job->Sync();
  if (sync && job->committing_round != 0) {
    // The version is being committed (the commit thread took its round out): the next round
    // is for the version after it, which this update was not trained from.
    return AlreadyExists("stale update: trained from version " + std::to_string(h.base_version()) +
                         ", the round is for version " + std::to_string(version + 1));
  }
  if (sync && staleness != 0) {
    return AlreadyExists("stale update: trained from version " + std::to_string(h.base_version()) +
                         ", the round is for version " + std::to_string(version));
  }
  if (staleness > job->spec.staleness_limit ||
      (job->store && !job->store->Get(h.base_version()).ok())) {
    return AlreadyExists("stale update: base version " + std::to_string(h.base_version()) +
                         " is older than the staleness limit (current " + std::to_string(version) +
                         ", limit " + std::to_string(job->spec.staleness_limit) + ")");
  }
  if (sync && client.submitted_round == job->open_round) {
    return AlreadyExists("client '" + client.id + "' already sent an update for this round");
  }
  if (job->secagg)
    SHOAL_RETURN_IF_ERROR(job->secagg->MayInput(client.id, job->open_round, job->Elapsed()));
  const double now = job->Elapsed();
  std::optional<agg::CompassDecision> decision;
  if (job->Compass()) {
    auto d = job->scheduler->OnArrival(NumericId(client.id), now);
    if (!d.ok()) return AlreadyExists(d.status().message());
    decision = std::move(*d);
  }
  if (pool != nullptr) {
    if (Status st = pool->Retain(buffer, kCoordinatorSlot); !st.ok()) {
      return Internal("cannot hold the update buffer: " + st.message());
    }
    job->pool = pool;
  }
  job->SetSamples(client, h.num_samples());
  job->Changed(client);
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
  t.node = node;  // another node's update: folded there, into that node's one partial sum
  if (!node.empty()) t.partial = job->RemoteKey(node);
  ++round.admitted;
  ++round.inflight;
  client.submitted_round = round_id;
  if (!job->Compass()) {
    // The round takes no more updates once it is due; later ones go to the next round.
    const bool due = sync ? (job->secagg ? job->secagg->InputsComplete(round_id, round.admitted)
                                         : round.admitted >= job->Needed())
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
  return HeaderAdmission{id, round_id, coefficient};
}

Result<uint64_t> FlCoordinator::PartialFor(uint64_t ticket, uint32_t instance) {
  if (ticket & FlMembers::kTicketBit) return members_->PartialFor(ticket, instance);
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
  if (pit != round.partials.end()) {
    pit->second.restored = false;  // (a restarted leaf of the same id folds on into its own)
    return pit->second.offset;
  }
  if (job->PartialSums()) {
    // A partial sum a restart loaded from its checkpoint: the round's first leaf folds on into
    // it (the same order of additions as without the restart).
    for (auto rit = round.partials.begin(); rit != round.partials.end(); ++rit) {
      if (!rit->second.restored || rit->second.base != tit->second.base_version) continue;
      JobState::Partial p = std::move(rit->second);
      p.restored = false;
      for (uint64_t tid : p.tickets) job->tickets[tid].partial = key;
      const uint64_t old_key = rit->first;
      round.partials.erase(rit);
      spdlog::info(
          "fl job {}: leaf {:#x} folds on into round {}'s partial sum {} loaded at restart",
          job->spec.name, instance, tit->second.round, old_key);
      return round.partials.emplace(key, std::move(p)).first->second.offset;
    }
  }
  // partialSums: no sink either (its updates could not be refolded: their buffers are gone).
  if (job->warm_partials.empty() && (job->version() == 0 || job->PartialSums())) {
    // The job's first version: its pool is known from its first update only, so none could be
    // warmed before; zeroed here, as many as its leaves take at first (the commit thread warms
    // the next ones).
    auto fresh = ZeroedPartial(*job->pool, job->mspec.num_params() * sizeof(float));
    if (!fresh.ok()) return fresh.status();
    Enqueue(job);
    round.partials[key].offset = *fresh;
    round.partials[key].base = tit->second.base_version;
    return *fresh;
  }
  if (job->warm_partials.empty()) {
    // None warm: no partial sum is zeroed here, on the gateway's loop (a large model's takes
    // tens of ms). The leaf folds this update into the job's sink, which nobody reads, and the
    // commit refolds it from the pool into a partial sum it zeroes itself (Partial::rebuild);
    // the commit thread warms partial sums for the next ones.
    if (job->sink == 0) {
      auto sink = job->pool->Allocate(job->mspec.num_params() * sizeof(float), kShoaldSlot);
      if (!sink.ok()) return sink.status();
      job->sink = *sink;
    }
    const uint64_t refolded = job->PartialKey(kRefoldedPartial, tit->second.base_version);
    tit->second.partial = refolded;
    JobState::Partial& p = round.partials[refolded];
    p.rebuild = true;
    p.base = tit->second.base_version;
    Enqueue(job);
    return job->sink;
  }
  const uint64_t off = job->warm_partials.back();
  job->warm_partials.pop_back();
  Enqueue(job);  // the commit thread zeroes the next one
  round.partials[key].offset = off;
  round.partials[key].base = tit->second.base_version;
  return off;
}

void FlCoordinator::Completed(uint64_t ticket, int http_status, bool leaf_answered) {
  if (ticket & FlMembers::kTicketBit) {
    members_->Completed(ticket, http_status, leaf_answered);
    return;
  }
  const std::shared_ptr<JobState> job = TakeLocked(mu_, by_ticket_, ticket);
  if (job == nullptr) return;
  bool commit = false;
  bool gpu_fallback = false;
  {
    std::lock_guard jl(job->mu);
    auto tit = job->tickets.find(ticket);
    if (tit == job->tickets.end()) return;
    JobState::Ticket& t = tit->second;
    JobState::Round& round = job->rounds[t.round];
    const uint64_t t_round = t.round;
    const std::string t_node = t.node;
    --round.inflight;
    bool counted = false;
    if (http_status >= 200 && http_status < 300) {
      // Logged before the gateway answers 202 (it does once this returns).
      // (Another node's update is in that node's log: it acknowledged it.)
      if (t.node.empty()) {
        t.seq = job->next_seq++;
        if (Status st = job->log.Append(RecordOf(t)); !st.ok()) {
          spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
        }
      }
      t.acked = true;
      counted = true;
      ++round.acked;
      round.partials[t.partial].tickets.push_back(ticket);
      if (!t.node.empty()) {
        round.partials[t.partial].node = t.node;
        ++job->remote_stats[t.node].updates;
      }
      JobState::Client& client = job->clients[t.client];
      ++client.updates;
      client.last_base_version = t.base_version;
      client.last_staleness = t.staleness;
      client.max_staleness = std::max(client.max_staleness, t.staleness);
      job->Changed(client);
      ++job->updates_total;
      if (job->PartialSums() && t.node.empty()) job->FoldedDurably(t);
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
      if (http_status == 502 && pit != round.partials.end() && t.node.empty()) {
        // The leaf died, or its GPU fold failed, maybe halfway through folding this update
        // into its partial sum. The partial is rebuilt from the acknowledged updates it holds
        // (still in the pool) when the round commits: a leaf that fell back to the CPU is
        // alive and may be folding the next update into it right now.
        pit->second.rebuild = true;
        if (leaf_answered) {
          ++job->gpu_fallbacks;
          gpu_fallback = true;
          spdlog::warn(
              "fl job {}: leaf {:#x}'s GPU fold failed; it folds on the CPU from now "
              "on, and its partial sum is rebuilt at commit",
              job->spec.name, t.instance);
        } else {
          spdlog::warn("fl job {}: leaf {:#x} failed; its partial sum is rebuilt at commit",
                       job->spec.name, t.instance);
        }
      }
      if (t.node.empty())
        job->ReleaseBuffer(t.buffer, kCoordinatorSlot, "an update its leaf did not take");
      job->tickets.erase(tit);
    }
    // (Cluster mode: a node's partial sum is fetched as soon as that node's updates of the
    // closed round have all answered, while the others still fold.)
    commit = round.closed && (round.inflight == 0 || job->NodeDone(t_round, t_node));
  }
  if (gpu_fallback && on_gpu_fallback_) on_gpu_fallback_(job->spec.name);
  if (commit) Enqueue(job);
}

void FlCoordinator::PartialChanged(uint64_t ticket) {
  if (ticket & FlMembers::kTicketBit) {
    members_->PartialChanged(ticket);
    return;
  }
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) return;
    job = it->second;
  }
  std::lock_guard jl(job->mu);
  auto tit = job->tickets.find(ticket);
  if (tit == job->tickets.end() || !tit->second.node.empty()) return;
  const JobState::Ticket& t = tit->second;
  auto pit = job->rounds[t.round].partials.find(t.partial);
  if (pit == job->rounds[t.round].partials.end()) return;
  pit->second.rebuild = true;
  spdlog::warn(
      "fl job {}: leaf {:#x} refused an update of client {} after folding part of it; its "
      "partial sum is rebuilt at commit",
      job->spec.name, t.instance, t.client);
}

void FlCoordinator::Enqueue(std::shared_ptr<JobState> job) {
  {
    std::lock_guard lock(commit_mu_);
    commit_queue_.push_back(std::move(job));
  }
  commit_cv_.notify_one();
}

}  // namespace shoal
