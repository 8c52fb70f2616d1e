// FlCoordinator's side of secure aggregation (spec.privacy.secureAggregation): the protocol's
// routes, checked against the job's clients and fed to the job's SecAggSession
// (shoal/fl/secagg), and the hooks its round logic calls: a round closes when every client that
// shared its keys has sent its masked input (or the stage times out), commits once the unmask
// stage has closed, and its total is the leaves' u32 partial sums added (still masked), unmasked
// once and decoded. The FedAvg step then sees an ordinary sum with weight 1 per survivor. In a
// cluster, the nodes' leaves fold the masked inputs that enter them and the top merges each
// node's masked partial sum like a leaf's: no node ever holds an unmasked one.
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/kernels/fold_u32.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own
namespace coordinator_internal {

Status InitSecureAggregation(FlCoordinator::JobState& job) {
  const FlJobSpec& s = job.spec;
  if (!s.privacy.secure_aggregation.enabled) return Status::Ok();
  const std::string p = "spec.privacy.secureAggregation";
  if (!job.algo->synchronous() ||
      (s.algorithm != "fedavg" && s.algorithm != "fedavgm" && s.algorithm != "fedadam")) {
    return InvalidArgument(p + ": algorithm " + s.algorithm +
                           " is not a synchronous FedAvg-family one: the masks cancel only in a "
                           "round's full sum (use fedavg, fedavgm or fedadam)");
  }
  if (s.privacy.dp.enabled) {
    return InvalidArgument(p +
                           ": spec.privacy.dp clips each update at the top, and the top sees "
                           "only masked updates: use one or the other");
  }
  if (s.robust.enabled()) {
    return InvalidArgument(p +
                           ": spec.aggregation.robust reads each update, and masked updates "
                           "are uniform noise to the server: use one or the other");
  }
  if (s.quorum != 0 || s.round_deadline_s > 0) {
    return InvalidArgument(p +
                           ": spec.clients.quorum and spec.deadlines.round do not apply: a "
                           "secure round's stages close on " +
                           p + ".stageTimeout");
  }
  secagg::SecAggConfig c;
  c.threshold = s.privacy.secure_aggregation.threshold;
  c.neighbours = s.privacy.secure_aggregation.neighbours;
  c.clip_range = s.privacy.secure_aggregation.clip_range;
  c.bits = s.privacy.secure_aggregation.bits;
  c.stage_timeout_s = s.privacy.secure_aggregation.stage_timeout_s;
  c.clients = s.clients;
  SHOAL_RETURN_IF_ERROR(secagg::ValidateConfig(c));
  job.secagg = std::make_unique<secagg::SecAggSession>(c);
  job.secagg_team = std::make_unique<agg::WorkerTeam>(0);
  return Status::Ok();
}

}  // namespace coordinator_internal

bool FlCoordinator::JobState::SecAggReady(uint64_t round_id, const Round& round) {
  std::vector<std::string> inputs;
  for (const auto& [key, p] : round.partials) {
    for (uint64_t tid : p.tickets) {
      auto t = tickets.find(tid);
      if (t != tickets.end()) inputs.push_back(t->second.client);
    }
  }
  if (inputs.empty()) {
    secagg->Fail(round_id, "no masked input was folded");
    return true;
  }
  return secagg->UnmaskReady(round_id, inputs, Elapsed());
}

bool FlCoordinator::JobState::CloseSecAggInput(uint64_t round_id) {
  auto it = rounds.find(round_id);
  if (it == rounds.end() || it->second.admitted == 0) {
    secagg->Fail(round_id, "no masked input arrived before the input stage timed out");
    return false;
  }
  if (it->second.closed || open_round != round_id) return false;
  spdlog::info("fl job {}: secure round {}: the input stage timed out with {} masked input(s)",
               spec.name, round_id, it->second.admitted);
  it->second.closed = true;
  ++open_round;
  return true;
}

Status FlCoordinator::JobState::SecAggTotal(const secagg::SecAggSession::UnmaskPlan& plan,
                                            const Round& round,
                                            const std::map<uint64_t, Ticket>& round_tickets,
                                            BufferPool* pool, agg::FoldPool* threads,
                                            std::string* sum_sha256) {
  const size_t n = mspec.num_params();
  std::vector<uint32_t> sum(n, 0);
  std::vector<std::pair<uint64_t, double>> folded;
  for (const auto& [key, p] : round.partials) {
    const bool remote = !p.node.empty();
    if (p.rebuild || (remote && (!p.fetched || p.sum.size() != n)) || (!remote && p.offset == 0)) {
      return Unavailable("secure-aggregation round " + std::to_string(plan.round) +
                         " refused: a leaf failed while folding a masked input");
    }
    // A leaf's masked partial sum here, or another node's (its leaves' sums added modulo 2^32
    // there, fetched as the same 4 bytes per parameter): still masked either way.
    const auto* leaf = remote ? reinterpret_cast<const uint32_t*>(p.sum.data())
                              : reinterpret_cast<const uint32_t*>(pool->Data(p.offset).data());
    if (threads != nullptr) {
      threads->FoldU32(sum.data(), leaf, n);
    } else {
      agg::FoldU32(sum.data(), leaf, n);
    }
    for (uint64_t tid : p.tickets) {
      auto t = round_tickets.find(tid);
      if (t != round_tickets.end()) folded.emplace_back(t->second.base_version, 1.0);
    }
  }
  if (plan.survivors != folded.size()) {
    return Internal("secure-aggregation round " + std::to_string(plan.round) + ": " +
                    std::to_string(plan.survivors) + " survivors but " +
                    std::to_string(folded.size()) + " folded inputs");
  }
  std::vector<float> values(n);
  SHOAL_RETURN_IF_ERROR(
      secagg::SecAggSession::ApplyUnmask(plan, sum, values, secagg_team.get(), sum_sha256));
  const agg::PartialSum::FoldedSum s{{values.data(), n}, folded, 1.0};
  return total.ResetToFolded(std::span(&s, 1), threads);
}

Result<std::string> FlCoordinator::SecureAggregation(const std::string& name,
                                                     const SecAggRequest& req) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  Json body = Json::object();
  std::string client_id = req.client_id, token = req.token;
  if (!req.step.empty()) {
    body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return InvalidArgument("body: must be a JSON object with client_id and token");
    }
    for (const char* key : {"client_id", "token"}) {
      if (body.contains(key) && !body[key].is_string()) {
        return InvalidArgument(std::string(key) + ": must be a string");
      }
    }
    client_id = body.value("client_id", "");
    token = body.value("token", "");
  }
  if (client_id.empty()) return InvalidArgument("client_id: required");
  bool commit = false;
  Result<Json> out = Json();
  {
    std::lock_guard jl(job->mu);
    if (!job->secagg) {
      return NotFound("FL job '" + name +
                      "' does not use secure aggregation (spec.privacy.secureAggregation)");
    }
    auto cit = job->clients.find(client_id);
    if (cit == job->clients.end()) {
      return NotFound("unknown client '" + client_id.substr(0, 64) + "'");
    }
    if (cit->second.token != token) {
      return PermissionDenied("bad token for client '" + client_id + "'");
    }
    const double now = job->Elapsed();
    if (req.step.empty()) {
      out = job->secagg->State(client_id, req.round);
    } else if (req.step == "advertise") {
      if (job->done) return AlreadyExists("job '" + name + "' is done");
      out = job->secagg->Advertise(client_id, job->open_round, body, now);
    } else if (req.step == "shares") {
      out = job->secagg->ShareKeys(client_id, body, now);
    } else if (req.step == "unmask") {
      out = job->secagg->UnmaskShares(client_id, body, now, &commit);
    } else {
      return NotFound("no secure-aggregation step '" + req.step.substr(0, 32) +
                      "' (advertise, shares, unmask)");
    }
  }
  if (commit) Enqueue(job);
  if (!out.ok()) return out.status();
  return out->dump() + "\n";
}

}  // namespace shoal
