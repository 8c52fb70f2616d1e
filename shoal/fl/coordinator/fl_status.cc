// FlCoordinator's job status (GET /v1/jobs/{job}): versions, clients, staleness, the FedCompass
// scheduler's view and the robust rule's verdicts, as one JSON document.
#include "shoal/fl/coordinator/job_state.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

Result<std::string> FlCoordinator::JobStatusJson(const std::string& name,
                                                 const StatusClientsPage& page) {
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
            {"clients",
             {{"expected", job->spec.clients},
              {"joined", job->clients.size()},
              {"sent_updates", job->samples_seen}}},
            {"updates_total", job->updates_total},
            {"gpu_fallbacks", job->gpu_fallbacks},
            {"partial_rebuilds", job->partial_rebuilds},
            {"durability",
             {{"mode", job->spec.durability.mode},
              {"partial_checkpoints", job->partial_checkpoints.load()},
              {"resend_asked", job->resend_asked}}},
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
  // spec.model.onnx: the file the handler loads the graph from (architecture "onnx").
  if (!job->spec.onnx_model.empty()) j["model"]["onnx"] = job->spec.onnx_model;
  // spec.model.lora (architecture "lora"): what a client or the serving side needs to apply a
  // committed adapter, which carries no metadata: W + (alpha / rank) B A over the base's linears.
  if (const FlLoraSpec& l = job->spec.lora; l.enabled()) {
    j["model"]["lora"] = {{"base", l.base},
                          {"rank", l.rank},
                          {"alpha", l.alpha},
                          {"targets", l.targets},
                          {"method", l.method}};
  }
  // A page of the clients (clients_from, clients_limit: the job's table is never walked whole),
  // each with its accepted updates and their staleness: `staleness` counts the versions
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
  const uint32_t limit = std::min(page.limit, StatusClientsPage::kMaxLimit);
  std::string first_id(1, 'c');  // "c" + to_string trips GCC 12's -Wrestrict here
  first_id += std::to_string(page.from);
  auto cit = job->clients.lower_bound(first_id);
  for (uint32_t listed = 0; cit != job->clients.end() && listed < limit; ++cit, ++listed) {
    const auto& [id, c] = *cit;
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
    if (job->dp) e["clipped_updates"] = c.clipped_updates;  // spec.privacy.dp's clip
    if (job->spec.robust.enabled()) {
      e["suspect_updates"] = c.suspect_updates;
      e["clipped_updates"] = c.clipped_updates;
      Json last = nullptr;
      if (c.last_verdict) {
        last = JobState::VerdictJson(*c.last_verdict);
        last["version"] = c.last_verdict_version;
      }
      e["robust"] = std::move(last);
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
  if (job->dp) {
    j["privacy"] = {{"dp", DpStatusJson(job->spec, *job->dp)}};
    if (!job->dp->stop_reason.empty()) j["reason"] = job->dp->stop_reason;
    // (ε, δ) per version beside the accuracy (the console's job page plots them).
    for (auto& v : j["versions"]) {
      for (const DpState::Version& dv : job->dp->versions) {
        if (dv.version == v["version"].get<uint64_t>()) {
          v["epsilon"] = std::isfinite(dv.epsilon) ? Json(dv.epsilon) : Json("inf");
          v["delta"] = job->spec.privacy.dp.delta;
        }
      }
    }
  }
  if (job->spec.robust.enabled()) {
    // spec.aggregation.robust, the clients with updates it excluded or down-weighted, and what
    // it made of each update of the last robust commit.
    const FlRobustSpec& r = job->spec.robust;
    Json suspects = Json::array();
    for (const std::string& id : job->suspect_clients) {
      auto it = job->clients.find(id);
      if (it == job->clients.end()) continue;
      const JobState::Client& c = it->second;
      suspects.push_back({{"id", id},
                          {"name", c.name},
                          {"suspect_updates", c.suspect_updates},
                          {"updates", c.updates}});
    }
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
  if (job->secagg) j["secure_aggregation"] = job->secagg->StatusJson();
  j["clients"]["list"] = std::move(clients);
  // The next page's clients_from (null: this page ends the list).
  j["clients"]["page"] = {
      {"from", page.from},
      {"limit", limit},
      {"next_from", cit == job->clients.end() ? Json(nullptr) : Json(NumericId(cit->first))}};
  // Cluster mode: the nodes that fold this job's updates for this top (LIFL's hierarchy).
  Json elsewhere = Json::object();
  for (const auto& [node, rs] : job->remote_stats) {
    elsewhere[node] = {{"updates", rs.updates},
                       {"partial_sums", rs.partials},
                       {"partial_sum_bytes", rs.partial_bytes},
                       {"lost_updates", rs.lost}};
  }
  j["folded_elsewhere"] = std::move(elsewhere);
  return j.dump() + "\n";
}

}  // namespace shoal
