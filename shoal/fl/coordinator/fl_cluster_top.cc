// FlCoordinator as the top of a job whose updates other nodes fold (cluster mode, LIFL's
// hierarchy across nodes): it admits their updates on the header alone (AdmitRemote), counts
// them when their node says they are folded and durable there (CompletedRemote), fetches each
// such node's one partial sum of a round before that round commits (FetchRemotePartials; the
// commit merges it like a local leaf's), and when such a node is lost un-counts what it held
// that had not reached the top, so that its clients send it again (NodeLost).
#include <fstream>
#include <set>
#include <thread>

#include "shoal/fl/coordinator/fl_members.h"
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/v1/fl.pb.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

std::string FlJobSpecJson(const FlJobSpec& spec) { return SpecToJson(spec).dump(); }

Result<FlJobSpec> FlJobSpecFromJson(std::string_view text) {
  auto j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("job spec: not a JSON object");
  try {
    return SpecFromJson(j);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("job spec: ") + e.what());
  }
}

bool FlCoordinator::FoldsElsewhere(const std::string& name) {
  auto job = Find(name);
  if (!job) return false;
  std::lock_guard jl(job->mu);
  // (A secure job's masked partial sums travel as the same 4 bytes per parameter and merge by
  // u32 addition at the top: fl_secagg.cc.)
  return !job->Robust() && !job->Compass() && !job->algo->staleness_at_commit();
}

Result<FlJobSpec> FlCoordinator::Spec(const std::string& name) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  return job->spec;
}

Result<FlTopLink::Admission> FlCoordinator::AdmitRemote(const std::string& name,
                                                        const std::string& node,
                                                        std::span<const std::byte> head,
                                                        uint64_t key) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  if (node.empty()) return InvalidArgument("admit: the folding node has no name");
  if (!FoldsElsewhere(name)) {
    return InvalidArgument("job '" + name +
                           "' folds every update at its top (robust or "
                           "FedCompass): send updates to node " +
                           config_.node_name);
  }
  shoal::v1::UpdateHeader h;
  SHOAL_RETURN_IF_ERROR(model::ParseUpdateHead(head, &h, nullptr));
  auto t = AdmitHeader(job, name, h, nullptr, 0, node);
  if (!t.ok()) return t.status();
  std::lock_guard jl(job->mu);
  if (auto it = job->tickets.find(t->ticket); it != job->tickets.end()) {
    it->second.key = key;
    it->second.probe_at = job->Elapsed() + kProbeAfterS;
    // Timers wakes the commit thread then, should it still be unanswered.
    if (job->remote_retry_at == 0 || it->second.probe_at < job->remote_retry_at) {
      job->remote_retry_at = it->second.probe_at;
    }
  }
  return FlTopLink::Admission{t->ticket, t->round, t->coefficient, job->durable_round};
}

void FlCoordinator::CompletedRemote(const std::string& name, uint64_t ticket, bool ok) {
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end() || it->second->spec.name != name) return;
  }
  Completed(ticket, ok ? 202 : 503, false);
}

void FlCoordinator::NodeLost(const std::string& node) {
  std::vector<std::shared_ptr<JobState>> jobs;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, j] : jobs_) jobs.push_back(j);
  }
  for (auto& job : jobs) Uncount(job, node, nullptr, "is lost");
}

void FlCoordinator::Uncount(const std::shared_ptr<JobState>& job, const std::string& node,
                            const std::vector<uint64_t>* only, const char* why) {
  std::vector<uint64_t> failed;  // answered below as failed updates (Completed)
  size_t acked = 0;
  {
    std::lock_guard jl(job->mu);
    for (auto& [id, t] : job->tickets) {
      if (t.node != node) continue;
      if (only != nullptr && std::find(only->begin(), only->end(), id) == only->end()) continue;
      JobState::Round& round = job->rounds[t.round];
      auto pit = round.partials.find(t.partial);
      if (pit != round.partials.end() && pit->second.fetched) continue;  // its sum is here
      if (t.acked) {
        // Counted, but its partial sum will not come: it counts no more, as if it were still
        // in flight and then failed.
        t.acked = false;
        --round.acked;
        ++round.inflight;
        if (pit != round.partials.end()) {
          auto& ids = pit->second.tickets;
          ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
          if (ids.empty()) round.partials.erase(pit);
        }
        JobState::Client& c = job->clients[t.client];
        if (c.updates > 0) --c.updates;
        job->Changed(c);
        if (job->updates_total > 0) --job->updates_total;
        JobState::RemoteStats& rs = job->remote_stats[node];
        if (rs.updates > 0) --rs.updates;
        ++rs.lost;
        ++acked;
      }
      failed.push_back(id);
    }
  }
  if (failed.empty()) return;
  spdlog::warn(
      "fl job {}: node {} {} with {} update(s) it admitted ({} acknowledged) whose "
      "partial sum never reached this top: they no longer count, and their clients "
      "are asked to send them again",
      job->spec.name, node, why, failed.size(), acked);
  {
    std::lock_guard lock(mu_);
    for (uint64_t id : failed) by_ticket_[id] = job;
  }
  for (uint64_t id : failed) Completed(id, 503, false);
  Enqueue(job);
}

void FlCoordinator::SetPartialFetch(PartialFetch fetch) {
  std::lock_guard lock(mu_);
  partial_fetch_ = std::move(fetch);
}

void FlCoordinator::SetAdmissionProbe(AdmissionProbe probe) {
  std::lock_guard lock(mu_);
  admission_probe_ = std::move(probe);
}

void FlCoordinator::ProbeRemoteAdmissions(const std::shared_ptr<JobState>& job) {
  std::map<std::string, std::map<uint64_t, uint64_t>> ask;  // node -> key -> ticket
  {
    std::lock_guard jl(job->mu);
    if (job->deleted) return;
    const double now = job->Elapsed();
    double next = 0;
    for (auto& [id, t] : job->tickets) {
      if (t.node.empty() || t.acked || t.key == 0) continue;
      if (now >= t.probe_at) {
        ask[t.node][t.key] = id;
        t.probe_at = now + kProbeAfterS;
      }
      next = next == 0 ? t.probe_at : std::min(next, t.probe_at);
    }
    // Asked again while they stay unanswered (Timers wakes the commit thread).
    if (next > 0 && (job->remote_retry_at == 0 || next < job->remote_retry_at)) {
      job->remote_retry_at = next;
    }
  }
  if (ask.empty()) return;
  AdmissionProbe probe;
  {
    std::lock_guard lock(mu_);
    probe = admission_probe_;
  }
  if (!probe) return;
  for (const auto& [node, tickets] : ask) {
    std::vector<uint64_t> keys;
    for (const auto& [key, id] : tickets) keys.push_back(key);
    auto unknown = probe(node, job->spec.name, keys);
    if (!unknown.ok()) {
      spdlog::warn("fl job {}: asking node {} about {} admission(s) still unanswered: {}",
                   job->spec.name, node, keys.size(), unknown.status().ToString());
      continue;
    }
    std::vector<uint64_t> lost;
    for (uint64_t key : *unknown) {
      if (auto it = tickets.find(key); it != tickets.end()) lost.push_back(it->second);
    }
    if (!lost.empty()) Uncount(job, node, &lost, "missed the top's answer");
    // Held there, in flight: said once, when one has waited about ten seconds.
    size_t slow = 0;
    {
      std::lock_guard jl(job->mu);
      for (const auto& [key, id] : tickets) {
        auto it = job->tickets.find(id);
        if (it != job->tickets.end() && !it->second.acked && ++it->second.probes == 5) ++slow;
      }
    }
    if (slow > 0) {
      spdlog::warn(
          "fl job {}: {} update(s) admitted {:.0f} s ago are still being folded on node {} "
          "(its leaf has not answered): their round waits for them",
          job->spec.name, slow, 5 * kProbeAfterS, node);
    }
  }
}

void FlCoordinator::FetchRemotePartials(const std::shared_ptr<JobState>& job) {
  struct Want {
    uint64_t round, key;
    std::string node;
    std::vector<uint64_t> tickets;
  };
  std::vector<Want> wants;
  {
    std::lock_guard jl(job->mu);
    if (job->deleted) return;
    for (const auto& [rid, round] : job->rounds) {
      if (!round.closed) break;  // rounds commit in order
      for (const auto& [key, p] : round.partials) {
        // A node's sum once its updates of the round have all answered (the others may fold on).
        if (!p.node.empty() && !p.fetched && job->NodeDone(rid, p.node)) {
          wants.push_back({rid, key, p.node, p.tickets});
        }
      }
    }
  }
  if (wants.empty()) return;
  PartialFetch fetch;
  {
    std::lock_guard lock(mu_);
    fetch = partial_fetch_;
  }
  // Every node's partial sum at once (each is float32[params] over its own link).
  struct Got {
    std::vector<float> sum;
    Status st;
    double ms = 0;
  };
  std::vector<Got> got(wants.size());
  {
    std::lock_guard jl(job->mu);  // warm buffers of earlier fetches (no page faults, no zeroing)
    for (Got& g : got) {
      if (job->spare_sums.empty()) break;
      g.sum = std::move(job->spare_sums.back());
      job->spare_sums.pop_back();
    }
  }
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < wants.size(); ++i) {
      threads.emplace_back([&, i] {
        const Want& w = wants[i];
        const auto t0 = Clock::now();
        got[i].st = fetch ? fetch(w.node, job->spec.name, w.round, w.tickets, &got[i].sum)
                          : Unavailable("no link to other nodes");
        if (got[i].st.ok() && got[i].sum.size() != job->mspec.num_params()) {
          got[i].st = Internal("its partial sum has " + std::to_string(got[i].sum.size()) +
                               " parameters, not " + std::to_string(job->mspec.num_params()));
        }
        got[i].ms = Seconds(t0) * 1e3;
      });
    }
    for (auto& t : threads) t.join();
  }
  for (size_t i = 0; i < wants.size(); ++i) {
    const Want& w = wants[i];
    const Status& st = got[i].st;
    if (!st.ok()) {
      spdlog::warn("fl job {}: round {}: node {}'s partial sum of {} update(s): {}", job->spec.name,
                   w.round, w.node, w.tickets.size(), st.ToString());
      // The node is alive but no longer has them (it restarted): their clients send again.
      if (st.code() == StatusCode::kNotFound)
        Uncount(job, w.node, &w.tickets, "no longer has them");
      continue;
    }
    spdlog::info("fl job {}: round {}: node {}'s partial sum of {} update(s) fetched in {:.1f} ms",
                 job->spec.name, w.round, w.node, w.tickets.size(), got[i].ms);
    std::lock_guard jl(job->mu);
    auto rit = job->rounds.find(w.round);
    if (rit == job->rounds.end()) continue;
    auto pit = rit->second.partials.find(w.key);
    if (pit == rit->second.partials.end() || pit->second.tickets != w.tickets) continue;
    JobState::RemoteStats& rs = job->remote_stats[w.node];
    ++rs.partials;
    rs.partial_bytes += got[i].sum.size() * sizeof(float);
    pit->second.sum = std::move(got[i].sum);
    pit->second.fetched = true;
  }
}

Status FlCoordinator::TakeOver(const std::string& name) {
  if (Find(name)) return AlreadyExists("this node is already the top of job '" + name + "'");
  if (config_.checkpoint_dir.empty()) {
    return InvalidArgument("checkpoint_dir: not set, so no node can take job '" + name + "' over");
  }
  const std::string dir = JobsRoot() + "/" + name;
  std::ifstream sf(dir + "/state.json");
  if (!sf) return NotFound("job '" + name + "' has no checkpoint in " + JobsRoot());
  Json state = Json::parse(sf, nullptr, false);
  if (state.is_discarded()) return Internal("corrupt FL job state: " + dir + "/state.json");
  const std::string from = state.value("top", std::string("?"));
  // What this node folded for the lost top never reached a checkpoint: those clients train
  // again, as the lost node's own.
  if (members_->Has(name)) members_->Remove(name);
  SHOAL_RETURN_IF_ERROR(RestoreJob(dir, state, /*take_over=*/true));
  auto job = Find(name);
  if (!job) return Internal("job '" + name + "' vanished while taken over");
  uint64_t durable;
  {
    std::lock_guard jl(job->mu);
    durable = Persist(job, /*with_model=*/false);  // state.json: this node is its top now
  }
  (void)job->FlushClientLog();  // logged
  writer_->Wait(durable);
  spdlog::warn(
      "fl job {}: this node took it over from node {} at version {} (its checkpoint "
      "in {}); updates not in that checkpoint are asked for again",
      name, from, job->version(), JobsRoot());
  if (on_change_) on_change_();
  return {};
}

// ---- this node folding for tops elsewhere: the FlDataPath side (fl_members.cc) ----

void FlCoordinator::SetTopLink(FlTopLink* link) { members_->SetTopLink(link); }

Status FlCoordinator::FoldFor(const FlJobSpec& spec, const std::string& top) {
  if (Find(spec.name)) return AlreadyExists("this node is the top of job '" + spec.name + "'");
  const bool known = members_->Has(spec.name);
  uint32_t leaf_id = 0;
  if (!known) {
    std::lock_guard lock(mu_);
    leaf_id = next_leaf_id_--;
  }
  SHOAL_RETURN_IF_ERROR(members_->Add(spec, top, leaf_id));
  if (!known) {
    spdlog::info(
        "fl job {}: this node folds its updates for its top on node {} (leaves: "
        "function {})",
        spec.name, top, LeafFunction(spec.name));
    if (on_change_) on_change_();
  }
  return {};
}

void FlCoordinator::StopFolding(const std::string& job) {
  if (!members_->Has(job)) return;
  members_->Remove(job);
  spdlog::info("fl job {}: this node no longer folds its updates", job);
  if (on_change_) on_change_();
}

bool FlCoordinator::FoldsForOtherNode(std::string_view job) { return members_->Has(job); }

Result<FlAdmission> FlCoordinator::AdmitForTop(std::string_view job, BufferPool& pool,
                                               std::span<const std::byte> body, uint64_t buffer,
                                               std::string_view bearer) {
  if (!members_->Has(job)) return Admit(job, pool, body, buffer);
  return members_->Admit(job, pool, body, buffer, bearer);
}

void FlCoordinator::AdmitForTopAsync(std::string_view job, BufferPool& pool,
                                     std::span<const std::byte> body, uint64_t buffer,
                                     std::string_view bearer, AdmitDone done) {
  if (!members_->Has(job)) {
    if (buffer == 0) {
      // Only its header was read (the gateway took the job for a member's): send it again.
      done(Unavailable("FL job '" + std::string(job) +
                       "' moved to this node while its update waited; send it again"));
      return;
    }
    done(Admit(job, pool, body, buffer));
    return;
  }
  members_->AdmitAsync(job, pool, body, buffer, bearer, std::move(done));
}

Status FlCoordinator::HoldUpdate(uint64_t ticket, BufferPool& pool, uint64_t buffer) {
  return members_->Hold(ticket, pool, buffer);
}

}  // namespace shoal
