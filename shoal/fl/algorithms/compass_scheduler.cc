#include "shoal/fl/algorithms/compass_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace shoal::aggregator {

void FedCompassScheduler::Start(double now) {
  if (!start_) start_ = now;
}

FedCompassScheduler::Client& FedCompassScheduler::ClientAt(ClientId id) {
  auto [it, inserted] = clients_.try_emplace(id);
  if (inserted) {
    // Every client fetched the initial model at the start and trains Q_max steps.
    it->second.start = *start_;
    it->second.steps = p_.q_max;
  }
  return it->second;
}

void FedCompassScheduler::UpdateSpeed(Client& c, double now) const {
  const double measured = (now - c.start) / static_cast<double>(c.steps);
  if (!c.seen) {
    c.speed = measured;
    c.seen = true;
  } else {
    c.speed = (1 - p_.speed_momentum) * c.speed + p_.speed_momentum * measured;
  }
}

Result<CompassDecision> FedCompassScheduler::OnArrival(ClientId id, double now) {
  if (!start_) {
    return InvalidArgument("FedCompass: update from client " + std::to_string(id) +
                           " before any client fetched the initial model");
  }
  Client& c = ClientAt(id);
  if (c.waiting_in_group) {
    return InvalidArgument("FedCompass: client " + std::to_string(id) +
                           " already has an update waiting in group " +
                           std::to_string(c.group.value_or(0)));
  }
  if (now < c.start) {
    return InvalidArgument("FedCompass: client " + std::to_string(id) + " arrived at " +
                           std::to_string(now) + ", before its assignment started at " +
                           std::to_string(c.start));
  }
  UpdateSpeed(c, now);

  CompassDecision d;
  d.update_id = next_update_id_++;
  if (!c.group) {  // first arrival: applied alone, then given a group
    d.action = CompassAction::kApplyAlone;
    d.assignments.push_back(Assign(id, now));
    return d;
  }

  const GroupId gid = *c.group;
  auto git = groups_.find(gid);
  if (git == groups_.end() || now > git->second.t_l) {
    // Late: leaves its group; its update waits in the general buffer for the next group
    // aggregation, and the client goes on at once with the current model.
    if (git != groups_.end()) {
      Group& g = git->second;
      std::erase(g.waiting, id);
      // A group with arrived members stays until its (overdue) timer aggregates them.
      if (g.waiting.empty() && g.arrived.empty()) groups_.erase(git);
    }
    c.group.reset();
    general_.push_back({id, d.update_id});
    d.action = CompassAction::kBufferedGeneral;
    d.assignments.push_back(Assign(id, now));
    return d;
  }

  Group& g = git->second;
  std::erase(g.waiting, id);
  g.arrived.push_back({id, d.update_id});
  c.waiting_in_group = true;
  if (!g.waiting.empty()) {
    d.action = CompassAction::kBufferedInGroup;
    d.group = gid;
    return d;
  }
  CompassDecision agg = Aggregate(gid, now);
  agg.update_id = d.update_id;
  return agg;
}

CompassDecision FedCompassScheduler::Aggregate(GroupId gid, double now) {
  CompassDecision d;
  d.action = CompassAction::kAggregateGroup;
  d.group = gid;
  auto git = groups_.find(gid);
  d.group_updates = std::move(git->second.arrived);
  groups_.erase(git);  // members still waiting will arrive late
  d.general_updates = std::move(general_);
  general_.clear();

  // Reassign the arrived members fastest first (smallest seconds per step), so the fast ones
  // pick their groups first; equal speeds keep their arrival order (as APPFL's stable sort of
  // the group's arrived clients does).
  std::vector<ClientId> members;
  for (const auto& u : d.group_updates) {
    clients_[u.client].waiting_in_group = false;
    members.push_back(u.client);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](ClientId a, ClientId b) { return clients_[a].speed < clients_[b].speed; });
  for (ClientId m : members) d.assignments.push_back(Assign(m, now));
  return d;
}

CompassAssignment FedCompassScheduler::Assign(ClientId id, double now) {
  Client& c = clients_[id];
  const auto q_min = static_cast<double>(p_.q_min);
  const auto q_max = static_cast<double>(p_.q_max);
  GroupId gid;
  if (groups_.empty()) {
    gid = CreateGroup(id, p_.q_max, now);
  } else {
    // Join the group this client can reach with the most steps within [Q_min, Q_max]; of
    // groups that give the same steps, the newest (APPFL scans its groups oldest first and
    // keeps the last that is not worse). groups_ is ordered by id, that is by creation.
    std::optional<GroupId> best;
    double best_q = -1;
    for (const auto& [g_id, g] : groups_) {
      const double q = std::floor((g.t_e - now) / c.speed);
      if (q >= q_min && q <= q_max && q >= best_q) {
        best = g_id;
        best_q = q;
      }
    }
    if (best) {
      gid = *best;
      groups_[gid].waiting.push_back(id);
      c.group = gid;
      c.steps = static_cast<uint32_t>(best_q);
      c.start = now;
    } else {
      // New group, timed to arrive around when an open group's fastest member would come back
      // for its next round: T_l + fastest speed · Q_max.
      double q_new = -1;
      for (const auto& [g_id, g] : groups_) {
        if (!(now < g.t_l)) continue;
        double fastest = std::numeric_limits<double>::infinity();
        for (ClientId m : g.waiting) fastest = std::min(fastest, clients_[m].speed);
        for (const auto& u : g.arrived) fastest = std::min(fastest, clients_[u.client].speed);
        const double est = g.t_l + fastest * q_max;
        const double q = std::floor((est - now) / c.speed);
        if (q <= q_max) q_new = std::max(q_new, q);
      }
      uint32_t steps = p_.q_max;
      if (q_new >= 0) steps = static_cast<uint32_t>(std::max(q_new, q_min));
      gid = CreateGroup(id, steps, now);
    }
  }
  return {id, c.steps, gid};
}

GroupId FedCompassScheduler::CreateGroup(ClientId id, uint32_t steps, double now) {
  Client& c = clients_[id];
  const GroupId gid = next_group_++;
  Group& g = groups_[gid];
  const double span = static_cast<double>(steps) * c.speed;
  g.t_e = now + span;
  g.t_l = now + span * p_.latest_time_factor;
  g.waiting.push_back(id);
  c.group = gid;
  c.steps = steps;
  c.start = now;
  return gid;
}

std::optional<double> FedCompassScheduler::NextTimer() const {
  std::optional<double> next;
  for (const auto& [id, g] : groups_) {
    if (!next || g.t_l < *next) next = g.t_l;
  }
  return next;
}

std::vector<CompassDecision> FedCompassScheduler::OnTimer(double now) {
  std::vector<CompassDecision> out;
  for (;;) {
    auto due = groups_.end();
    for (auto it = groups_.begin(); it != groups_.end(); ++it) {
      if (it->second.t_l <= now && (due == groups_.end() || it->second.t_l < due->second.t_l)) {
        due = it;
      }
    }
    if (due == groups_.end()) break;
    if (due->second.arrived.empty()) {
      groups_.erase(due);  // nobody came in time: its members will all arrive late
    } else {
      out.push_back(Aggregate(due->first, now));
    }
  }
  return out;
}

std::string FedCompassScheduler::Save() const {
  using Json = nlohmann::json;
  auto refs = [](const std::vector<CompassUpdateRef>& v) {
    Json a = Json::array();
    for (const auto& u : v) a.push_back({u.client, u.update_id});
    return a;
  };
  Json clients = Json::array();
  for (const auto& [id, c] : clients_) {
    clients.push_back({{"id", id},
                       {"seen", c.seen},
                       {"speed", c.speed},
                       {"start", c.start},
                       {"steps", c.steps},
                       {"group", c.group ? Json(*c.group) : Json(nullptr)},
                       {"waiting_in_group", c.waiting_in_group}});
  }
  Json groups = Json::array();
  for (const auto& [id, g] : groups_) {
    groups.push_back({{"id", id},
                      {"t_e", g.t_e},
                      {"t_l", g.t_l},
                      {"waiting", g.waiting},
                      {"arrived", refs(g.arrived)}});
  }
  Json j = {{"start", start_ ? Json(*start_) : Json(nullptr)},
            {"next_update_id", next_update_id_},
            {"next_group", next_group_},
            {"clients", clients},
            {"groups", groups},
            {"general", refs(general_)}};
  return j.dump();
}

Status FedCompassScheduler::Load(std::string_view text) {
  using Json = nlohmann::json;
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("FedCompass state: not JSON");
  try {
    auto refs = [](const Json& a) {
      std::vector<CompassUpdateRef> v;
      for (const auto& u : a) v.push_back({u.at(0).get<ClientId>(), u.at(1).get<uint64_t>()});
      return v;
    };
    std::optional<double> start;
    if (j.at("start").is_number()) start = j["start"].get<double>();
    std::map<ClientId, Client> clients;
    for (const auto& c : j.at("clients")) {
      Client cl;
      cl.seen = c.at("seen").get<bool>();
      cl.speed = c.at("speed").get<double>();
      cl.start = c.at("start").get<double>();
      cl.steps = c.at("steps").get<uint32_t>();
      if (c.at("group").is_number()) cl.group = c["group"].get<GroupId>();
      cl.waiting_in_group = c.at("waiting_in_group").get<bool>();
      clients[c.at("id").get<ClientId>()] = cl;
    }
    std::map<GroupId, Group> groups;
    for (const auto& g : j.at("groups")) {
      Group gr;
      gr.t_e = g.at("t_e").get<double>();
      gr.t_l = g.at("t_l").get<double>();
      gr.waiting = g.at("waiting").get<std::vector<ClientId>>();
      gr.arrived = refs(g.at("arrived"));
      groups[g.at("id").get<GroupId>()] = std::move(gr);
    }
    general_ = refs(j.at("general"));
    start_ = start;
    next_update_id_ = j.at("next_update_id").get<uint64_t>();
    next_group_ = j.at("next_group").get<GroupId>();
    clients_ = std::move(clients);
    groups_ = std::move(groups);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("FedCompass state: ") + e.what());
  }
  return Status::Ok();
}

std::optional<FedCompassScheduler::GroupView> FedCompassScheduler::group(GroupId id) const {
  auto it = groups_.find(id);
  if (it == groups_.end()) return std::nullopt;
  GroupView v{id, it->second.t_e, it->second.t_l, it->second.waiting, {}};
  for (const auto& u : it->second.arrived) v.arrived.push_back(u.client);
  return v;
}

std::vector<GroupId> FedCompassScheduler::open_groups() const {
  std::vector<GroupId> ids;
  for (const auto& [id, g] : groups_) ids.push_back(id);
  return ids;
}

std::optional<double> FedCompassScheduler::speed(ClientId client) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || !it->second.seen) return std::nullopt;
  return it->second.speed;
}

std::optional<CompassAssignment> FedCompassScheduler::assignment(ClientId client) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || !it->second.group) return std::nullopt;
  return CompassAssignment{client, it->second.steps, *it->second.group};
}

}  // namespace shoal::aggregator
