#include "shoal/fl/secagg/secagg_session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shoal::secagg {
namespace {

constexpr size_t kKeptRounds = 8;

// The coordinator's client order: "c2" before "c10".
bool ClientLess(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

Result<Key32> KeyField(const nlohmann::json& body, const char* field) {
  if (!body.contains(field) || !body[field].is_string()) {
    return InvalidArgument(std::string(field) + ": required (32 bytes, base64)");
  }
  auto bytes = FromBase64(body[field].get<std::string>(), SecAggSession::kKeyBytes, field);
  if (!bytes.ok()) return bytes.status();
  Key32 k;
  std::memcpy(k.data(), bytes->data(), SecAggSession::kKeyBytes);
  return k;
}

}  // namespace

const char* StageName(Stage s) {
  switch (s) {
    case Stage::kAdvertise:
      return "advertise";
    case Stage::kShare:
      return "share";
    case Stage::kInput:
      return "input";
    case Stage::kUnmask:
      return "unmask";
    case Stage::kDone:
      return "done";
    case Stage::kFailed:
      return "failed";
  }
  return "?";
}

Status ValidateConfig(const SecAggConfig& c) {
  const std::string p = "spec.privacy.secureAggregation.";
  if (c.neighbours < 2 || c.neighbours % 2 != 0) {
    return InvalidArgument(p + "neighbours: must be an even number >= 2 (the graph is k-regular)");
  }
  if (c.threshold < 2) return InvalidArgument(p + "threshold: must be >= 2");
  if (c.threshold > c.neighbours) {
    return InvalidArgument(p + "threshold: " + std::to_string(c.threshold) +
                           " is more than neighbours (" + std::to_string(c.neighbours) +
                           "): a client's secret is shared among its neighbours only");
  }
  if (c.bits < 1 || c.bits > 31) return InvalidArgument(p + "bits: must be from 1 to 31");
  if (!(c.clip_range > 0) || !std::isfinite(c.clip_range)) {
    return InvalidArgument(p + "clipRange: must be a finite number > 0");
  }
  if (c.clients != 0 &&
      static_cast<double>(c.clients) * static_cast<double>((uint64_t{1} << c.bits) - 1) >=
          4294967296.0) {
    return InvalidArgument(p + "bits: " + std::to_string(c.clients) + " clients x (2^" +
                           std::to_string(c.bits) +
                           " - 1) overflows the 32-bit sum; lower bits or clients");
  }
  if (c.clients != 0 && c.clients < c.threshold) {
    return InvalidArgument(p + "threshold: " + std::to_string(c.threshold) +
                           " is more than spec.clients (" + std::to_string(c.clients) + ")");
  }
  if (!(c.stage_timeout_s > 0)) {
    return InvalidArgument(p + "stageTimeoutSeconds: must be > 0");
  }
  return Status::Ok();
}

SecAggSession::SecAggSession(SecAggConfig config) : config_(config) {}

SecAggSession::Round* SecAggSession::Current() {
  return rounds_.empty() ? nullptr : &rounds_.back();
}

const SecAggSession::Round* SecAggSession::Find(uint64_t id) const {
  if (id == 0) return rounds_.empty() ? nullptr : &rounds_.back();
  for (const Round& r : rounds_) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

SecAggSession::Round* SecAggSession::ForCoord(uint64_t coord_round, Stage stage) {
  for (Round& r : rounds_) {
    if (r.coord_round == coord_round && r.stage == stage) return &r;
  }
  return nullptr;
}

bool SecAggSession::IsNeighbour(const Round& r, uint32_t a, uint32_t b) const {
  const auto& n = r.graph[a];
  return std::binary_search(n.begin(), n.end(), b);
}

Status SecAggSession::CheckRound(const Round& r, const Json& body) const {
  if (!body.contains("round") || !body["round"].is_number_unsigned()) {
    return InvalidArgument("round: required (the secure-aggregation round, from /secagg)");
  }
  if (body["round"].get<uint64_t>() != r.id) {
    return AlreadyExists("round: " + std::to_string(body["round"].get<uint64_t>()) +
                         " is not the current secure-aggregation round (" + std::to_string(r.id) +
                         ")");
  }
  return Status::Ok();
}

void SecAggSession::FailRound(Round& r, const std::string& why) {
  r.stage = Stage::kFailed;
  r.failure = why;
}

Result<nlohmann::json> SecAggSession::Advertise(const std::string& client, uint64_t open_round,
                                                const Json& body, double now) {
  Round* r = Current();
  if (r == nullptr || r->stage == Stage::kDone || r->stage == Stage::kFailed) {
    if (rounds_.size() >= kKeptRounds) rounds_.pop_front();
    Round fresh;
    fresh.id = next_id_++;
    fresh.coord_round = open_round;
    fresh.stage_since = now;
    uint64_t seed = 0;
    SHOAL_RETURN_IF_ERROR(RandomBytes(std::span(reinterpret_cast<uint8_t*>(&seed), sizeof seed)));
    fresh.graph_seed = seed;
    rounds_.push_back(std::move(fresh));
    r = &rounds_.back();
  }
  if (r->stage != Stage::kAdvertise) {
    return AlreadyExists("secure-aggregation round " + std::to_string(r->id) +
                         " is past key advertisement (stage " + StageName(r->stage) +
                         "); advertise again once it ends");
  }
  if (r->index.count(client)) {
    return AlreadyExists("client '" + client + "' already advertised keys for secure-aggregation " +
                         "round " + std::to_string(r->id));
  }
  auto c_pk = KeyField(body, "c_pk");
  if (!c_pk.ok()) return c_pk.status();
  auto s_pk = KeyField(body, "s_pk");
  if (!s_pk.ok()) return s_pk.status();
  if (*c_pk == *s_pk) return InvalidArgument("s_pk: must differ from c_pk (two key pairs)");
  if (!body.contains("b_commit") || !body["b_commit"].is_string()) {
    return InvalidArgument("b_commit: required (SHA-256 of the self-mask seed, base64)");
  }
  auto commit = FromBase64(body["b_commit"].get<std::string>(), 32, "b_commit");
  if (!commit.ok()) return commit.status();
  for (const auto& [field, key] : {std::pair{"c_pk", *c_pk}, std::pair{"s_pk", *s_pk}}) {
    if (seen_keys_.count(Hex(key))) {
      return AlreadyExists(std::string(field) +
                           ": this public key was already advertised in this job (a replay, or "
                           "a key used twice); a client makes fresh keys every round");
    }
  }
  seen_keys_.insert(Hex(*c_pk));
  seen_keys_.insert(Hex(*s_pk));
  Participant p;
  p.id = client;
  p.c_pk = *c_pk;
  p.s_pk = *s_pk;
  std::memcpy(p.b_commit.data(), commit->data(), 32);
  r->index[client] = static_cast<uint32_t>(r->parts.size());
  r->parts.push_back(std::move(p));
  r->stage_since = now;
  if (config_.clients != 0 && r->parts.size() >= config_.clients) CloseAdvertise(*r, now);
  return Json{{"round", r->id}, {"stage", StageName(r->stage)}};
}

void SecAggSession::CloseAdvertise(Round& r, double now) {
  if (r.parts.size() < config_.threshold) {
    FailRound(r, std::to_string(r.parts.size()) + " client(s) advertised keys, fewer than the " +
                     "threshold " + std::to_string(config_.threshold));
    return;
  }
  std::sort(r.parts.begin(), r.parts.end(),
            [](const Participant& a, const Participant& b) { return ClientLess(a.id, b.id); });
  r.index.clear();
  for (uint32_t i = 0; i < r.parts.size(); ++i) r.index[r.parts[i].id] = i;
  r.graph = NeighbourGraph(static_cast<uint32_t>(r.parts.size()), config_.neighbours, r.graph_seed);
  r.stage = Stage::kShare;
  r.stage_since = now;
}

Result<nlohmann::json> SecAggSession::ShareKeys(const std::string& client, const Json& body,
                                                double now) {
  Round* r = Current();
  if (r == nullptr) return NotFound("no secure-aggregation round is open");
  SHOAL_RETURN_IF_ERROR(CheckRound(*r, body));
  auto it = r->index.find(client);
  if (it == r->index.end() || r->stage == Stage::kAdvertise) {
    if (r->stage == Stage::kAdvertise && it != r->index.end()) {
      return AlreadyExists("secure-aggregation round " + std::to_string(r->id) +
                           " is still advertising keys; share once /secagg says stage share");
    }
    return PermissionDenied("client: '" + client + "' is not in secure-aggregation round " +
                            std::to_string(r->id) +
                            "'s graph (it did not advertise keys before the stage closed)");
  }
  if (r->stage != Stage::kShare) {
    return AlreadyExists(std::string("secure-aggregation round ") + std::to_string(r->id) +
                         " is past key sharing (stage " + StageName(r->stage) + ")");
  }
  const uint32_t self = it->second;
  Participant& me = r->parts[self];
  if (me.shared) {
    return AlreadyExists("client '" + client + "' already shared its keys in round " +
                         std::to_string(r->id));
  }
  if (!body.contains("shares") || !body["shares"].is_object()) {
    return InvalidArgument("shares: required (an object: neighbour id -> sealed share, base64)");
  }
  std::map<uint32_t, std::string> sealed;
  for (const auto& [to, value] : body["shares"].items()) {
    const std::string field = "shares." + to.substr(0, 64);
    auto t = r->index.find(to);
    if (t == r->index.end() || !IsNeighbour(*r, self, t->second)) {
      return InvalidArgument(field + ": not a neighbour of " + client + " in round " +
                             std::to_string(r->id));
    }
    if (!value.is_string()) return InvalidArgument(field + ": must be a string (base64)");
    auto bytes = FromBase64(value.get<std::string>(), 0, field);
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() < 28 || bytes->size() > 4096) {
      return InvalidArgument(field + ": must be a sealed share (28 to 4096 bytes)");
    }
    sealed[t->second] = value.get<std::string>();
  }
  for (uint32_t n : r->graph[self]) {
    if (!sealed.count(n)) {
      return InvalidArgument("shares." + r->parts[n].id +
                             ": missing (a share for every neighbour)");
    }
  }
  me.sealed = std::move(sealed);
  me.shared = true;
  r->stage_since = now;
  const bool all =
      std::all_of(r->parts.begin(), r->parts.end(), [](const Participant& p) { return p.shared; });
  if (all) CloseShare(*r, now);
  return Json{{"round", r->id}, {"stage", StageName(r->stage)}};
}

void SecAggSession::CloseShare(Round& r, double now) {
  const auto shared =
      std::count_if(r.parts.begin(), r.parts.end(), [](const Participant& p) { return p.shared; });
  if (static_cast<uint32_t>(shared) < config_.threshold) {
    FailRound(r, std::to_string(shared) + " client(s) shared their keys, fewer than the " +
                     "threshold " + std::to_string(config_.threshold));
    return;
  }
  r.stage = Stage::kInput;
  r.stage_since = now;
}

Status SecAggSession::MayInput(const std::string& client, uint64_t coord_round, double now) {
  for (Round& r : rounds_) {
    if (r.coord_round != coord_round || r.stage != Stage::kInput) continue;
    auto it = r.index.find(client);
    if (it == r.index.end() || !r.parts[it->second].shared) {
      return PermissionDenied("client '" + client + "' is not in secure-aggregation round " +
                              std::to_string(r.id) +
                              "'s input set (it did not share its keys before that stage closed)");
    }
    r.stage_since = now;
    return Status::Ok();
  }
  return AlreadyExists(
      "no secure-aggregation round is taking masked inputs now (advertise keys and share them "
      "first: /v1/jobs/<job>/secagg)");
}

bool SecAggSession::InputsComplete(uint64_t coord_round, uint32_t admitted) const {
  for (const Round& r : rounds_) {
    if (r.coord_round != coord_round || r.stage != Stage::kInput) continue;
    const auto shared = std::count_if(r.parts.begin(), r.parts.end(),
                                      [](const Participant& p) { return p.shared; });
    return admitted >= static_cast<uint32_t>(shared);
  }
  return false;
}

SecAggSession::TimerResult SecAggSession::OnTimer(double now) {
  TimerResult out;
  Round* r = Current();
  if (r == nullptr || now - r->stage_since < config_.stage_timeout_s) return out;
  switch (r->stage) {
    case Stage::kAdvertise:
      if (!r->parts.empty()) CloseAdvertise(*r, now);
      break;
    case Stage::kShare:
      CloseShare(*r, now);
      break;
    case Stage::kInput:
      out.close_input = true;
      out.coord_round = r->coord_round;
      r->stage_since = now;  // asked once per timeout
      break;
    case Stage::kUnmask:
      out.commit_due = true;
      r->stage_since = now;
      r->stage = Stage::kDone;  // closed: Unmask decides with what it has
      break;
    default:
      break;
  }
  return out;
}

bool SecAggSession::UnmaskReady(uint64_t coord_round, const std::vector<std::string>& inputs,
                                double now) {
  if (Round* r = ForCoord(coord_round, Stage::kInput)) {
    for (const std::string& c : inputs) {
      auto it = r->index.find(c);
      if (it != r->index.end()) r->parts[it->second].input = true;
    }
    r->stage = Stage::kUnmask;
    r->stage_since = now;
  }
  for (const Round& r : rounds_) {
    if (r.coord_round != coord_round) continue;
    if (r.stage == Stage::kDone || r.stage == Stage::kFailed) return true;
    if (r.stage == Stage::kUnmask) {
      return std::all_of(r.parts.begin(), r.parts.end(),
                         [](const Participant& p) { return !p.input || p.answered; });
    }
  }
  return true;  // no protocol round: Unmask says why
}

void SecAggSession::Fail(uint64_t coord_round, const std::string& why) {
  for (Round& r : rounds_) {
    if (r.coord_round == coord_round && r.stage != Stage::kDone && r.stage != Stage::kFailed) {
      FailRound(r, why);
    }
  }
}

Result<nlohmann::json> SecAggSession::State(const std::string& client, uint64_t round) const {
  const Round* r = Find(round);
  if (r == nullptr) {
    return NotFound(round == 0
                        ? "no secure-aggregation round yet: advertise keys first"
                        : "secure-aggregation round " + std::to_string(round) + " not found");
  }
  Json j{{"round", r->id}, {"stage", StageName(r->stage)}, {"threshold", config_.threshold}};
  if (r->stage == Stage::kFailed) j["reason"] = r->failure;
  auto it = r->index.find(client);
  const bool graphed = r->stage != Stage::kAdvertise && !r->graph.empty();
  if (it == r->index.end() || !graphed) {
    j["member"] = it != r->index.end();
    j["retry_after_ms"] = 100;
    return j;
  }
  const uint32_t self = it->second;
  j["member"] = true;
  j["index"] = self;
  j["graph_seed"] = std::to_string(r->graph_seed);
  Json neighbours = Json::array();
  for (uint32_t n : r->graph[self]) {
    const Participant& p = r->parts[n];
    neighbours.push_back(
        {{"id", p.id}, {"index", n}, {"c_pk", Base64(p.c_pk)}, {"s_pk", Base64(p.s_pk)}});
  }
  j["neighbours"] = std::move(neighbours);
  if (r->stage == Stage::kShare) {
    j["retry_after_ms"] = 100;
    return j;
  }
  // From the input stage on: which neighbours shared (the masks to add), the shares for me.
  Json shared = Json::array(), inbox = Json::object();
  for (uint32_t n : r->graph[self]) {
    const Participant& p = r->parts[n];
    if (!p.shared) continue;
    shared.push_back(p.id);
    if (auto s = p.sealed.find(self); s != p.sealed.end()) inbox[p.id] = s->second;
  }
  j["shared"] = std::move(shared);
  j["shares"] = std::move(inbox);
  if (r->stage == Stage::kUnmask || r->stage == Stage::kDone) {
    Json survivors = Json::array(), dropped = Json::array();
    for (uint32_t n : r->graph[self]) {
      const Participant& p = r->parts[n];
      if (!p.shared) continue;
      (p.input ? survivors : dropped).push_back(p.id);
    }
    j["survivors"] = std::move(survivors);
    j["dropped"] = std::move(dropped);
    j["answered"] = r->parts[self].answered;
  }
  if (r->stage != Stage::kDone) j["retry_after_ms"] = 100;
  return j;
}

nlohmann::json SecAggSession::StatusJson() const {
  Json rounds = Json::array();
  for (const Round& r : rounds_) {
    uint32_t shared = 0, inputs = 0;
    for (const Participant& p : r.parts) {
      shared += p.shared;
      inputs += p.input;
    }
    Json x{{"round", r.id},
           {"coordinator_round", r.coord_round},
           {"stage", StageName(r.stage)},
           {"advertised", r.parts.size()},
           {"shared", shared},
           {"inputs", inputs}};
    if (r.stage == Stage::kDone && !r.sum_sha256.empty()) {
      x["survivors"] = r.survivors;
      x["dropped"] = r.dropped;
      x["sum_sha256"] = r.sum_sha256;
    }
    if (r.stage == Stage::kFailed) x["reason"] = r.failure;
    rounds.push_back(std::move(x));
  }
  return Json{{"threshold", config_.threshold},
              {"neighbours", config_.neighbours},
              {"clipRange", config_.clip_range},
              {"bits", config_.bits},
              {"stageTimeoutSeconds", config_.stage_timeout_s},
              {"rounds", std::move(rounds)}};
}

}  // namespace shoal::secagg
