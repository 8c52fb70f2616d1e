// FleetService: the routes, the nodes (register, activate, heartbeats, deactivate, unregister)
// and the run (GetRun, GetFab). Messages and objects: fleet_messages.cc.
#include "shoal/fl/flower/fleet_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "shoal/fl/flower/fleet_errors.h"

namespace shoal::flower {

namespace {

uint64_t RandomId() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  uint64_t v = 0;
  // Flower reserves 0 (none) and 1 (the SuperLink itself); ids stay within sint64.
  while (v <= 1) v = gen() >> 1;
  return v;
}

std::string IsoNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lld+00:00", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us));
  return buf;
}

void SetScalar(Scalar& s, const FlFlowerValue& v) {
  switch (v.kind) {
    case 'i':
      s.set_sint64(std::stoll(v.text));
      break;
    case 'f':
      s.set_double_(std::stod(v.text));
      break;
    case 'b':
      s.set_bool_(v.text == "true");
      break;
    default:
      s.set_string(v.text);
  }
}

}  // namespace

FleetService::FleetService(Hooks hooks) : hooks_(std::move(hooks)) {}

bool FleetService::Matches(std::string_view path) { return path.starts_with("/v1/fleet/"); }

std::optional<HttpReply> FleetService::Authenticate(std::string_view rpc, std::string_view body,
                                                    const NodeAuthHeaders& auth) {
  const auto refuse = [&](const std::string& why) {
    spdlog::info("flower: {} refused: {}", rpc, why);
    std::lock_guard lock(mu_);
    ++counters_.unauthenticated;
    return std::optional<HttpReply>(FastApiError(401, "Invalid SuperNode authentication"));
  };
  auto key = AuthenticateNode(
      auth, hooks_.wall_now ? hooks_.wall_now() : std::chrono::system_clock::now());
  if (!key.ok()) return refuse(key.status().message());
  auto id = IdentityOf(body);
  if (!id.ok()) return std::nullopt;  // the call's own parse answers it (Invalid protobuf payload)
  if (rpc == "register-node" || rpc == "activate-node") {
    if (!id->has_key || id->public_key != *key) {
      return refuse("the request's public key is not the one that signed it");
    }
    return std::nullopt;
  }
  bool registered = false;
  {
    std::lock_guard lock(mu_);
    auto it = node_by_key_.find(*key);
    registered = it != node_by_key_.end() && it->second == id->node_id;
  }
  if (!registered) return refuse("node " + std::to_string(id->node_id) + " is not the signer's");
  return std::nullopt;
}

HttpReply FleetService::Handle(std::string_view method, std::string_view path,
                               std::string_view body, const NodeAuthHeaders& auth) {
  using Route = HttpReply (FleetService::*)(std::string_view);
  static const std::map<std::string_view, Route> kRoutes = {
      {"register-node", &FleetService::RegisterNode},
      {"activate-node", &FleetService::ActivateNode},
      {"deactivate-node", &FleetService::DeactivateNode},
      {"unregister-node", &FleetService::UnregisterNode},
      {"send-node-heartbeat", &FleetService::Heartbeat},
      {"pull-messages", &FleetService::PullMessages},
      {"push-messages", &FleetService::PushMessages},
      {"pull-object", &FleetService::PullObject},
      {"push-object", &FleetService::PushObject},
      {"confirm-message-received", &FleetService::ConfirmReceived},
      {"get-run", &FleetService::GetRun},
      {"get-fab", &FleetService::GetFab},
  };
  auto it = kRoutes.find(path.substr(std::string_view("/v1/fleet/").size()));
  if (it == kRoutes.end()) return FastApiError(404, "Not Found");
  if (method != "POST") return FastApiError(405, "Method Not Allowed");
  if (auto refused = Authenticate(it->first, body, auth)) return std::move(*refused);
  {
    std::lock_guard lock(mu_);
    ExpireLocked(Now());
  }
  return (this->*it->second)(body);
}

void FleetService::ExpireLocked(Clock::time_point now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + std::chrono::seconds(1);
  const auto idle = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(kSessionIdleSeconds));
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (now - it->second.touched < idle) {
      ++it;
      continue;
    }
    auto ins = instructions_.find(it->second.instruction);
    if (ins != instructions_.end()) ins->second.replied = false;  // it may be answered again
    spdlog::warn(
        "flower: node {}: its reply to {} got no object for {} s: let go ({} of its "
        "objects still missing)",
        it->second.node, it->second.instruction.substr(0, 12), kSessionIdleSeconds,
        it->second.pending.size());
    ++counters_.sessions_expired;
    it = sessions_.erase(it);
  }
  for (auto it = instructions_.begin(); it != instructions_.end();) {
    auto node = nodes_.find(it->second.node);
    const bool pushing = std::any_of(sessions_.begin(), sessions_.end(), [&](const auto& kv) {
      return kv.second.instruction == it->first;
    });
    if (node == nodes_.end() || now <= node->second.online_until || it->second.replied || pushing) {
      ++it;
      continue;
    }
    // The node is offline: its message goes, and it is sent the job's current task again
    // should it come back.
    if (it->second.type == "train") {
      node->second.trained_version = UINT64_MAX;
    } else {
      node->second.evaluated_version = 0;
    }
    if (auto job = jobs_.find(it->second.job); job != jobs_.end())
      job->second.objects.erase(it->first);
    spdlog::warn("flower: node {} is offline: its {} message for version {} let go",
                 it->second.node, it->second.type, it->second.version);
    ++counters_.messages_expired;
    it = instructions_.erase(it);
  }
}

FleetCounters FleetService::counters() {
  std::lock_guard lock(mu_);
  return counters_;
}

std::string FleetService::StateJson() {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, job] : jobs_) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& [id, n] : nodes_) {
      if (n.job != name) continue;
      nodes.push_back({{"node_id", id}, {"client", n.client_id}, {"active", n.active}});
    }
    out[name] = {{"run_id", job.run_id}, {"fab_hash", job.fab.hash}, {"nodes", nodes}};
  }
  return out.dump();
}

Result<FleetService::Job*> FleetService::JobLocked(const std::string& name) {
  auto spec = hooks_.spec(name);
  if (!spec.ok()) return spec.status();
  if (!spec->flower.enabled()) return NotFound("job '" + name + "' is not a Flower job");
  auto it = jobs_.find(name);
  if (it != jobs_.end() && it->second.spec.generation == spec->generation) return &it->second;
  auto fab = LoadFab(spec->flower.fab);
  if (!fab.ok()) return fab.status();
  Job& job = jobs_[name];
  job = Job{};
  job.name = name;
  job.fab = std::move(*fab);
  job.run_id = RandomId();
  job.spec = std::move(*spec);
  spdlog::info("flower: job {} is Flower run {} (FAB {} {} {})", name, job.run_id, job.fab.fab_id,
               job.fab.version, job.fab.hash.substr(0, 12));
  ListSpecKeysLocked(job);
  return &job;
}

Result<FleetService::Job*> FleetService::JobForNewNode() {
  // A node joins the first Flower job (by name) that still lacks clients, else the first one:
  // the node is that job's from then on, and its id reaches nothing of another job.
  Job* first = nullptr;
  bool allow_listing = false;
  for (const std::string& name : hooks_.jobs->ListJobs()) {
    auto job = JobLocked(name);
    if (!job.ok()) continue;
    if ((*job)->spec.flower.supernode_auth) {
      allow_listing = true;  // its nodes are registered through the control API only
      continue;
    }
    size_t attached = 0;
    for (const auto& [id, n] : nodes_) attached += n.job == name && n.active ? 1 : 0;
    if (attached < (*job)->spec.clients) return *job;
    if (first == nullptr) first = *job;
  }
  if (first == nullptr && allow_listing) {
    return PermissionDenied("the Flower jobs here authenticate SuperNodes");
  }
  if (first == nullptr) return NotFound("no Flower job on this gateway");
  return first;
}

HttpReply FleetService::RegisterNode(std::string_view body) {
  RegisterNodeFleetRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  if (node_by_key_.count(req.public_key()) != 0) {
    return FlowerError(412, kPublicKeyAlreadyInUse, "Public key already in use.");
  }
  auto job = JobForNewNode();
  if (!job.ok() && job.status().code() == StatusCode::kPermissionDenied) {
    // As a SuperLink started with --enable-supernode-auth answers.
    spdlog::info("flower: a node's RegisterNode refused: {}", job.status().message());
    return FlowerError(412, kRegistrationDisabled,
                       "SuperNode authentication is enabled. All SuperNodes must be registered "
                       "via the CLI.");
  }
  if (!job.ok()) {
    return FlowerError(412, kNodeActivationFailed, "Failed to activate SuperNode.",
                       job.status().message());
  }
  // The node is the job's client: it joins as Shoal's own clients do (its updates are the
  // job's updates, its evaluations the job's reports).
  const uint64_t id = RandomId();
  const auto& tokens = (*job)->spec.join_tokens;
  auto joined = hooks_.jobs->Join((*job)->name, "flower-" + std::to_string(id),
                                  tokens.empty() ? std::string() : tokens.front());
  if (!joined.ok()) {
    return FlowerError(412, kNodeActivationFailed, "Failed to activate SuperNode.",
                       joined.status().message());
  }
  Node& n = nodes_[id];
  n.id = id;
  n.public_key = req.public_key();
  n.job = (*job)->name;
  n.client_id = joined->client_id;
  n.token = joined->token;
  n.joined = true;
  node_by_key_[n.public_key] = id;
  ++counters_.nodes_registered;
  spdlog::info("flower: node {} registered in job {} as client {}", id, n.job, n.client_id);
  RegisterNodeFleetResponse resp;
  resp.set_node_id(id);
  return Proto(resp);
}

HttpReply FleetService::ActivateNode(std::string_view body) {
  ActivateNodeRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  auto it = node_by_key_.find(req.public_key());
  if (it == node_by_key_.end()) {
    // A job deployed since may list the key (spec.flower.supernodes): load the Flower jobs.
    for (const std::string& name : hooks_.jobs->ListJobs()) (void)JobLocked(name);
    it = node_by_key_.find(req.public_key());
  }
  if (it == node_by_key_.end()) {
    spdlog::info("flower: ActivateNode refused: a key no job lists or registered");
    return FlowerError(412, kNodeActivationFailed, "Failed to activate SuperNode.");
  }
  if (!ValidHeartbeatInterval(req.heartbeat_interval())) {
    return FlowerError(400, kInvalidHeartbeatInterval, "Invalid heartbeat interval.");
  }
  Node& n = nodes_.at(it->second);
  if (Status st = JoinLocked(n); !st.ok()) {
    return FlowerError(412, kNodeActivationFailed, "Failed to activate SuperNode.", st.message());
  }
  n.active = true;
  n.activated = true;
  n.heartbeat_interval = req.heartbeat_interval();
  n.online_until =
      Now() + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(kHeartbeatPatience * n.heartbeat_interval));
  ActivateNodeResponse resp;
  resp.set_node_id(n.id);
  return Proto(resp);
}

HttpReply FleetService::DeactivateNode(std::string_view body) {
  DeactivateNodeRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  auto it = nodes_.find(req.node_id());
  if (it == nodes_.end() || !it->second.active) {
    return FlowerError(412, kNodeDeactivationFailed, "Failed to deactivate SuperNode.");
  }
  it->second.active = false;
  return Proto(DeactivateNodeResponse());
}

HttpReply FleetService::UnregisterNode(std::string_view body) {
  UnregisterNodeFleetRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  auto it = nodes_.find(req.node_id());
  if (it == nodes_.end()) {
    return FlowerError(412, kNodeUnregistrationFailed, "Failed to unregister SuperNode.");
  }
  if (it->second.listed) {
    return FlowerError(412, kUnregistrationDisabled,
                       "SuperNode authentication is enabled. All SuperNodes must be unregistered "
                       "via the CLI.");
  }
  // Its undelivered work goes with it; what it pushed is already the job's.
  node_by_key_.erase(it->second.public_key);
  std::erase_if(instructions_, [&](const auto& kv) { return kv.second.node == it->first; });
  spdlog::info("flower: node {} of job {} unregistered", it->first, it->second.job);
  nodes_.erase(it);
  return Proto(UnregisterNodeFleetResponse());
}

HttpReply FleetService::Heartbeat(std::string_view body) {
  SendNodeHeartbeatRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  if (!ValidHeartbeatInterval(req.heartbeat_interval())) {
    return FlowerError(400, kInvalidHeartbeatInterval, "Invalid heartbeat interval.");
  }
  std::lock_guard lock(mu_);
  SendNodeHeartbeatResponse resp;
  auto it = nodes_.find(req.node().node_id());
  if (it != nodes_.end()) {
    it->second.active = true;
    it->second.heartbeat_interval = req.heartbeat_interval();
    it->second.online_until =
        Now() + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(kHeartbeatPatience * req.heartbeat_interval()));
    resp.set_success(true);
  }
  return Proto(resp);
}

HttpReply FleetService::GetRun(std::string_view body) {
  GetRunRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  auto n = nodes_.find(req.node().node_id());
  auto job = n == nodes_.end() ? jobs_.end() : jobs_.find(n->second.job);
  if (job == jobs_.end() || job->second.run_id != req.run_id()) {
    return FlowerError(403, kGetRunFailed, "Failed to get run.");
  }
  const Job& j = job->second;
  GetRunResponse resp;
  Run& run = *resp.mutable_run();
  run.set_run_id(j.run_id);
  run.set_fab_id(j.fab.fab_id);
  run.set_fab_version(j.fab.version);
  run.set_fab_hash(j.fab.hash);
  for (const auto& [key, value] : j.spec.flower.run_config) {
    SetScalar((*run.mutable_override_config())[key], value);
  }
  const std::string now = IsoNow();
  run.set_pending_at(now);
  run.set_starting_at(now);
  run.set_running_at(now);
  run.mutable_status()->set_status("running");
  run.set_federation("default");
  run.set_series_id(j.run_id);
  return Proto(resp);
}

HttpReply FleetService::GetFab(std::string_view body) {
  GetFabRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  auto n = nodes_.find(req.node().node_id());
  auto job = n == nodes_.end() ? jobs_.end() : jobs_.find(n->second.job);
  if (job == jobs_.end() || job->second.run_id != req.run_id() ||
      job->second.fab.hash != req.hash_str()) {
    return FlowerError(403, kGetFabFailed, "Failed to get FAB.");
  }
  GetFabResponse resp;
  resp.mutable_fab()->set_hash_str(job->second.fab.hash);
  resp.mutable_fab()->set_content(*job->second.fab.bytes);
  return Proto(resp);
}

}  // namespace shoal::flower
