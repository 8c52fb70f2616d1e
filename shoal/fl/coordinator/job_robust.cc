// FlCoordinator::JobState's robust commits (spec.aggregation.robust): the rule over a round's
// updates in the pool, and what it made of each client's update.
#include "shoal/fl/coordinator/job_state.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

std::vector<uint64_t> FlCoordinator::JobState::RoundTickets(const Round& round) {
  std::vector<uint64_t> ids;
  for (const auto& [key, p] : round.partials)
    ids.insert(ids.end(), p.tickets.begin(), p.tickets.end());
  return ids;
}
Result<RobustOutcome> FlCoordinator::JobState::RobustMerge(
    const FlRobustSpec& rule, const Round& round, const std::map<uint64_t, Ticket>& from,
    const std::vector<float>& weights, uint64_t version, RobustCommitter& committer) {
  std::vector<std::span<const std::byte>> bodies;
  double c = 0;
  for (uint64_t tid : RoundTickets(round)) {
    const Ticket& t = from.at(tid);
    bodies.push_back(ReadPayload(pool->Data(t.buffer)).body);
    c += t.coefficient;
  }
  robust_out.resize(mspec.num_params());
  auto outcome = committer.Aggregate(rule, mspec, weights.data(), bodies, robust_out.data());
  if (!outcome.ok()) return outcome.status();
  total.Reset();
  SHOAL_RETURN_IF_ERROR(total.Fold(robust_out, c, version));
  return outcome;
}
void FlCoordinator::JobState::RobustVerdicts(
    const Round& round, const std::map<uint64_t, Ticket>& from, const RobustOutcome& outcome,
    uint64_t new_version, std::vector<std::pair<std::string, std::string>>* suspects) {
  const std::vector<uint64_t> ids = RoundTickets(round);
  Json list = Json::array();
  for (size_t i = 0; i < ids.size() && i < outcome.updates.size(); ++i) {
    const Ticket& t = from.at(ids[i]);
    const RobustVerdict& v = outcome.updates[i];
    Client& cl = clients[t.client];
    cl.last_verdict = v;
    cl.last_verdict_version = new_version;
    cl.suspect_updates += v.suspect ? 1 : 0;
    cl.clipped_updates += v.clipped ? 1 : 0;
    if (cl.suspect_updates > 0) suspect_clients.insert(t.client);
    Changed(cl);
    if (v.suspect) suspects->emplace_back(t.client, outcome.rule);
    Json e = VerdictJson(v);
    e["client"] = t.client;
    e["name"] = cl.name;
    list.push_back(std::move(e));
  }
  robust_last = {{"version", new_version},
                 {"rule", outcome.rule},
                 {"fallback", outcome.fallback.empty() ? Json(nullptr) : Json(outcome.fallback)},
                 {"updates", std::move(list)},
                 {"ms", outcome.ms}};
  if (outcome.rule == "flag") robust_last["flag_iterations"] = outcome.flag_iterations;
  if (!outcome.fallback.empty()) spdlog::warn("fl job {}: {}", spec.name, outcome.fallback);
}
Json FlCoordinator::JobState::VerdictJson(const RobustVerdict& v) {
  return {{"weight", v.weight},
          {"clip_scale", v.clip_scale},
          {"krum_score", v.krum_score ? Json(*v.krum_score) : Json(nullptr)},
          {"suspect", v.suspect}};
}

}  // namespace shoal
