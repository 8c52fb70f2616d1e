// FleetService: the jobs' SuperNode allow-lists, as Flower 1.42's SuperLink keeps them with
// --enable-supernode-auth: a key is registered (spec.flower.supernodes at deploy, or the control
// API as `flwr supernode register` does) before its node can activate; RegisterNode from a node
// is refused; unregistering a key makes its node's next call 401, and flower-supernode stops.
#include <spdlog/spdlog.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <random>

#include "shoal/fl/flower/fleet_service.h"
#include "shoal/fl/flower/node_keys.h"

namespace shoal::flower {

namespace {

uint64_t NewNodeId() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  uint64_t v = 0;
  while (v <= 1) v = gen() >> 1;  // Flower reserves 0 and 1 (the SuperLink)
  return v;
}

HttpReply JsonReply(int status, const nlohmann::json& j) {
  HttpReply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = j.dump();
  return r;
}

HttpReply ErrorReply(int status, const std::string& message) {
  return JsonReply(status, {{"error", message}});
}

}  // namespace

FleetService::Node& FleetService::AddListedLocked(const std::string& job, const std::string& pem) {
  uint64_t id = NewNodeId();
  while (nodes_.count(id) != 0) id = NewNodeId();
  Node& n = nodes_[id];
  n.id = id;
  n.public_key = pem;
  n.job = job;
  n.listed = true;
  node_by_key_[pem] = id;
  return n;
}

void FleetService::ListSpecKeysLocked(const Job& job) {
  if (!job.spec.flower.supernode_auth) return;
  const auto& revoked = revoked_[job.name];
  for (const std::string& text : job.spec.flower.supernodes) {
    auto pem = NodePublicKeyPem(text);
    if (!pem.ok()) {
      spdlog::warn("flower: job {}: a key of spec.flower.supernodes is not listed: {}", job.name,
                   pem.status().message());
      continue;
    }
    if (node_by_key_.count(*pem) != 0 || revoked.count(*pem) != 0) continue;
    const Node& n = AddListedLocked(job.name, *pem);
    spdlog::info("flower: job {}: SuperNode {} registered from spec.flower.supernodes", job.name,
                 n.id);
  }
}

Status FleetService::JoinLocked(Node& n) {
  if (n.joined) return Status::Ok();
  auto job = JobLocked(n.job);
  if (!job.ok()) return job.status();
  const auto& tokens = (*job)->spec.join_tokens;
  auto joined = hooks_.jobs->Join(n.job, "flower-" + std::to_string(n.id),
                                  tokens.empty() ? std::string() : tokens.front());
  if (!joined.ok()) return joined.status();
  n.client_id = joined->client_id;
  n.token = joined->token;
  n.joined = true;
  ++counters_.nodes_registered;
  spdlog::info("flower: node {} activated in job {} as client {}", n.id, n.job, n.client_id);
  return Status::Ok();
}

HttpReply FleetService::Supernodes(std::string_view method, const std::string& job_name,
                                   std::string_view node_id, std::string_view body) {
  std::lock_guard lock(mu_);
  auto job = JobLocked(job_name);
  if (!job.ok()) return ErrorReply(HttpStatusFor(job.status().code()), job.status().message());
  if (!(*job)->spec.flower.supernode_auth) {
    return ErrorReply(409, "job '" + job_name +
                               "' does not authenticate SuperNodes: deploy it with "
                               "spec.flower.supernodeAuth: true (or spec.flower.supernodes)");
  }
  if (method == "GET" && node_id.empty()) {
    nlohmann::json list = nlohmann::json::array();
    const auto now = Now();
    for (const auto& [id, n] : nodes_) {
      if (n.job != job_name) continue;
      const char* status = !n.activated                        ? "registered"
                           : n.active && now <= n.online_until ? "online"
                                                               : "offline";
      list.push_back({{"nodeId", id},
                      {"publicKey", n.public_key},
                      {"status", status},
                      {"client", n.client_id}});
    }
    return JsonReply(200, {{"job", job_name}, {"supernodes", std::move(list)}});
  }
  if (method == "POST" && node_id.empty()) {
    auto req = nlohmann::json::parse(body, nullptr, false);
    if (req.is_discarded() || !req.is_object() || !req.contains("publicKey") ||
        !req["publicKey"].is_string()) {
      return ErrorReply(400, "the body must be {\"publicKey\": <OpenSSH ecdsa line or PEM>}");
    }
    auto pem = NodePublicKeyPem(req["publicKey"].get<std::string>());
    if (!pem.ok()) return ErrorReply(400, pem.status().message());
    if (auto it = node_by_key_.find(*pem); it != node_by_key_.end()) {
      return ErrorReply(409, "Public key already in use (SuperNode " + std::to_string(it->second) +
                                 " of job '" + nodes_.at(it->second).job + "')");
    }
    revoked_[job_name].erase(*pem);
    const Node& n = AddListedLocked(job_name, *pem);
    spdlog::info("flower: job {}: SuperNode {} registered through the control API", job_name, n.id);
    return JsonReply(201, {{"job", job_name}, {"nodeId", n.id}, {"publicKey", n.public_key}});
  }
  if (method == "DELETE" && !node_id.empty()) {
    uint64_t id = 0;
    const auto [p, ec] = std::from_chars(node_id.data(), node_id.data() + node_id.size(), id);
    auto it =
        ec == std::errc() && p == node_id.data() + node_id.size() ? nodes_.find(id) : nodes_.end();
    if (it == nodes_.end() || it->second.job != job_name) {
      return ErrorReply(404, "no SuperNode " + std::string(node_id) + " in job '" + job_name + "'");
    }
    // Its key goes (its next call is 401: flower-supernode stops), with its undelivered work;
    // what it pushed is already the job's.
    revoked_[job_name].insert(it->second.public_key);
    node_by_key_.erase(it->second.public_key);
    std::erase_if(instructions_, [&](const auto& kv) { return kv.second.node == id; });
    spdlog::info("flower: job {}: SuperNode {} unregistered through the control API", job_name, id);
    nodes_.erase(it);
    return JsonReply(200, {{"job", job_name}, {"nodeId", id}, {"unregistered", true}});
  }
  return ErrorReply(405,
                    "method " + std::string(method) +
                        (node_id.empty() ? " not allowed: GET, POST" : " not allowed: DELETE"));
}

}  // namespace shoal::flower
