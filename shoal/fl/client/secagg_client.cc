#include "shoal/fl/client/secagg_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "shoal/common/assign_or_return.h"
#include "shoal/fl/secagg/masking.h"
#include "shoal/fl/secagg/shamir.h"

namespace shoal::client {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kShareMagic[4] = {'S', 'S', 'A', '1'};
constexpr size_t kShareHead = 4 + 4 + 4 + 8;  // magic, from index, to index, round
constexpr size_t kKeyElements = secagg::ShareElements(32);
constexpr size_t kSeedElements = secagg::ShareElements(16);
// How often a stage is asked for while awaited (the Python SDK's default too).
constexpr auto kPoll = std::chrono::milliseconds(20);

std::vector<uint8_t> Aad(uint64_t round) {
  static constexpr std::string_view kPrefix = "shoal-secagg v1";
  std::vector<uint8_t> aad(kPrefix.begin(), kPrefix.end());
  for (int i = 0; i < 8; ++i) aad.push_back(static_cast<uint8_t>(round >> (8 * i)));
  return aad;
}

template <typename T>
void PutLe(std::vector<uint8_t>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

template <typename T>
T GetLe(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}

Result<json> ParseJson(std::string_view text, std::string_view what) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return Internal(std::string(what) + ": the reply is not a JSON object");
  return j;
}

Result<secagg::Key32> KeyField(const json& n, const char* field) {
  if (!n.contains(field) || !n[field].is_string()) {
    return Internal(std::string("secagg state: a neighbour lacks ") + field);
  }
  SHOAL_ASSIGN_OR_RETURN(std::vector<uint8_t> raw,
                         secagg::FromBase64(n[field].get<std::string>(), 32, field));
  secagg::Key32 k{};
  std::copy(raw.begin(), raw.end(), k.begin());
  return k;
}

}  // namespace

Result<std::optional<SecAggParams>> SecAggParamsOf(std::string_view status_json) {
  const json j = json::parse(status_json, nullptr, false);
  if (!j.is_object()) return InvalidArgument("job status: not a JSON object");
  if (!j.contains("secure_aggregation")) return std::optional<SecAggParams>{};
  const json& s = j["secure_aggregation"];
  if (!s.is_object() || !s.contains("threshold") || !s["threshold"].is_number_unsigned() ||
      !s.contains("clipRange") || !s["clipRange"].is_number() || !s.contains("bits") ||
      !s["bits"].is_number_unsigned()) {
    return InvalidArgument(
        "job status: secure_aggregation needs threshold, clipRange and bits (numbers)");
  }
  SecAggParams p;
  p.threshold = s["threshold"].get<uint32_t>();
  p.clip_range = s["clipRange"].get<double>();
  p.bits = s["bits"].get<uint32_t>();
  return std::optional<SecAggParams>(p);
}

SecAggClient::SecAggClient(FlHttpClient& http, std::string client_id, std::string token,
                           SecAggParams params, std::function<bool()> stopped,
                           double stage_timeout_s)
    : http_(http),
      client_id_(std::move(client_id)),
      token_(std::move(token)),
      params_(params),
      stopped_(std::move(stopped)),
      stage_timeout_s_(stage_timeout_s) {}

Result<uint64_t> SecAggClient::RunRound(const model::UpdateMeta& meta, const model::Model& update) {
  SHOAL_ASSIGN_OR_RETURN(const uint64_t round, Advertise());
  SHOAL_RETURN_IF_ERROR(Share());
  SHOAL_ASSIGN_OR_RETURN(std::vector<uint32_t> masked, Mask(update.values));
  SHOAL_RETURN_IF_ERROR(PostMasked(meta, update.spec, masked));
  SHOAL_RETURN_IF_ERROR(Unmask());
  return round;
}

Result<uint64_t> SecAggClient::Advertise() {
  SHOAL_ASSIGN_OR_RETURN(c_, secagg::GenerateKeyPair());
  SHOAL_ASSIGN_OR_RETURN(s_, secagg::GenerateKeyPair());
  SHOAL_RETURN_IF_ERROR(secagg::RandomBytes(b_));
  neighbours_.clear();
  const json body = {{"client_id", client_id_},
                     {"token", token_},
                     {"c_pk", secagg::Base64(c_.public_key)},
                     {"s_pk", secagg::Base64(s_.public_key)},
                     {"b_commit", secagg::Base64(secagg::Sha256(b_))}};
  const std::string text = body.dump();
  const auto deadline = Clock::now() + std::chrono::duration<double>(stage_timeout_s_);
  for (;;) {
    auto reply = http_.SecAggPost("advertise", text);
    if (reply.ok()) {
      SHOAL_ASSIGN_OR_RETURN(json j, ParseJson(*reply, "secagg advertise"));
      if (!j.contains("round") || !j["round"].is_number_unsigned()) {
        return Internal("secagg advertise: the reply has no round");
      }
      round_ = j["round"].get<uint64_t>();
      return round_;
    }
    // The previous protocol round is still closing: its next one opens soon.
    const bool closing =
        reply.status().code() == StatusCode::kAlreadyExists &&
        reply.status().message().find("past key advertisement") != std::string::npos;
    if ((!closing && !IsRetryable(reply.status())) || Clock::now() > deadline) {
      return reply.status();
    }
    if (stopped_ && stopped_()) return Unavailable("secure aggregation: stopped");
    std::this_thread::sleep_for(kPoll);
  }
}

Result<std::string> SecAggClient::WaitStage(std::initializer_list<std::string_view> stages) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(stage_timeout_s_);
  std::string last = "?";
  for (;;) {
    auto state = http_.SecAggState(client_id_, token_, round_);
    if (state.ok()) {
      SHOAL_ASSIGN_OR_RETURN(json j, ParseJson(*state, "secagg state"));
      last = j.value("stage", "");
      if (last == "failed") {
        return Unavailable("secure aggregation round " + std::to_string(round_) +
                           " failed: " + j.value("reason", std::string("(no reason given)")));
      }
      if (std::find(stages.begin(), stages.end(), last) != stages.end()) {
        return std::move(*state);
      }
    } else if (!IsRetryable(state.status())) {
      return state.status();
    }
    if (Clock::now() > deadline) {
      return Status(StatusCode::kDeadlineExceeded,
                    "secure aggregation round " + std::to_string(round_) + ": stage " + last +
                        " for more than " + std::to_string(stage_timeout_s_) + " s");
    }
    if (stopped_ && stopped_()) return Unavailable("secure aggregation: stopped");
    std::this_thread::sleep_for(kPoll);
  }
}

Status SecAggClient::ParseNeighbours(std::string_view state_json) {
  SHOAL_ASSIGN_OR_RETURN(json j, ParseJson(state_json, "secagg state"));
  if (!j.contains("index") || !j["index"].is_number_unsigned() || !j.contains("neighbours") ||
      !j["neighbours"].is_array()) {
    return Internal("secagg state: no index or neighbours (is this client in the round?)");
  }
  index_ = j["index"].get<uint32_t>();
  neighbours_.clear();
  for (const json& n : j["neighbours"]) {
    Neighbour x;
    if (!n.contains("id") || !n["id"].is_string() || !n.contains("index") ||
        !n["index"].is_number_unsigned()) {
      return Internal("secagg state: a neighbour lacks id or index");
    }
    x.id = n["id"].get<std::string>();
    x.index = n["index"].get<uint32_t>();
    SHOAL_ASSIGN_OR_RETURN(x.c_pk, KeyField(n, "c_pk"));
    SHOAL_ASSIGN_OR_RETURN(x.s_pk, KeyField(n, "s_pk"));
    neighbours_.push_back(std::move(x));
  }
  return Status::Ok();
}

Result<secagg::Seed> SecAggClient::ShareKey(const Neighbour& n) const {
  SHOAL_ASSIGN_OR_RETURN(const secagg::Key32 shared, secagg::Agree(c_.secret, n.c_pk));
  secagg::Seed key{};
  SHOAL_RETURN_IF_ERROR(secagg::Hkdf(shared, secagg::kShareInfo, key));
  return key;
}

Status SecAggClient::Share() {
  SHOAL_ASSIGN_OR_RETURN(std::string st, WaitStage({"share", "input", "unmask", "done"}));
  SHOAL_ASSIGN_OR_RETURN(json j, ParseJson(st, "secagg state"));
  if (j.value("stage", "") != "share") {
    return Unavailable("secure aggregation round " + std::to_string(round_) + " is at " +
                       j.value("stage", "") + ": too late to share keys");
  }
  SHOAL_RETURN_IF_ERROR(ParseNeighbours(st));
  std::vector<uint64_t> xs;
  for (const Neighbour& n : neighbours_) xs.push_back(uint64_t{n.index} + 1);
  SHOAL_ASSIGN_OR_RETURN(std::vector<secagg::Share> sk_shares,
                         secagg::Split(s_.secret, xs, params_.threshold));
  SHOAL_ASSIGN_OR_RETURN(std::vector<secagg::Share> b_shares,
                         secagg::Split(b_, xs, params_.threshold));
  const std::vector<uint8_t> aad = Aad(round_);
  json sealed = json::object();
  for (size_t i = 0; i < neighbours_.size(); ++i) {
    const Neighbour& n = neighbours_[i];
    std::vector<uint8_t> plain(kShareMagic, kShareMagic + 4);
    PutLe<uint32_t>(plain, index_);
    PutLe<uint32_t>(plain, n.index);
    PutLe<uint64_t>(plain, round_);
    for (uint64_t y : sk_shares[i].ys) PutLe<uint64_t>(plain, y);
    for (uint64_t y : b_shares[i].ys) PutLe<uint64_t>(plain, y);
    SHOAL_ASSIGN_OR_RETURN(const secagg::Seed key, ShareKey(n));
    SHOAL_ASSIGN_OR_RETURN(std::vector<uint8_t> box, secagg::Seal(key, plain, aad));
    std::fill(plain.begin(), plain.end(), uint8_t{0});
    sealed[n.id] = secagg::Base64(box);
  }
  const json body = {
      {"client_id", client_id_}, {"token", token_}, {"round", round_}, {"shares", sealed}};
  auto reply = http_.SecAggPost("shares", body.dump());
  return reply.ok() ? Status::Ok() : reply.status();
}

Result<std::vector<uint32_t>> SecAggClient::Mask(std::span<const float> values) {
  SHOAL_ASSIGN_OR_RETURN(std::string st, WaitStage({"input", "unmask", "done"}));
  SHOAL_ASSIGN_OR_RETURN(json j, ParseJson(st, "secagg state"));
  if (j.value("stage", "") != "input") {
    return Unavailable("secure aggregation round " + std::to_string(round_) + " is at " +
                       j.value("stage", "") + ": too late for a masked input");
  }
  if (!j.contains("shared") || !j["shared"].is_array()) {
    return Internal("secagg state: no 'shared' list at the input stage");
  }
  std::set<std::string> shared;
  for (const json& id : j["shared"]) {
    if (id.is_string()) shared.insert(id.get<std::string>());
  }
  std::vector<secagg::SignedSeed> pairs;
  for (const Neighbour& n : neighbours_) {
    if (!shared.count(n.id)) continue;
    SHOAL_ASSIGN_OR_RETURN(const secagg::Seed seed, secagg::PairwiseSeed(s_.secret, n.s_pk));
    pairs.push_back({seed, secagg::PairSign(index_, n.index)});
  }
  secagg::Quantizer quantizer{params_.clip_range, params_.bits};
  std::vector<uint32_t> q(values.size());
  quantizer.Quantize(values, q);
  return secagg::MaskInput(q, b_, pairs);
}

Status SecAggClient::PostMasked(const model::UpdateMeta& meta, const model::ModelSpec& spec,
                                std::span<const uint32_t> masked) {
  SHOAL_ASSIGN_OR_RETURN(std::vector<std::byte> body,
                         model::EncodeMaskedUpdate(meta, spec, masked));
  const std::string_view bytes(reinterpret_cast<const char*>(body.data()), body.size());
  const auto deadline = Clock::now() + std::chrono::duration<double>(stage_timeout_s_);
  for (;;) {
    const Status st = http_.PostUpdate(bytes);
    if (st.ok() || !IsRetryable(st) || Clock::now() > deadline) return st;
    if (stopped_ && stopped_()) return Unavailable("secure aggregation: stopped");
    std::this_thread::sleep_for(std::chrono::milliseconds(
        http_.retry_after_ms() > 0 ? http_.retry_after_ms() : uint32_t{50}));
  }
}

Status SecAggClient::Unmask() {
  SHOAL_ASSIGN_OR_RETURN(std::string st, WaitStage({"unmask", "done"}));
  SHOAL_ASSIGN_OR_RETURN(json j, ParseJson(st, "secagg state"));
  if (j.value("stage", "") != "unmask" || j.value("answered", false)) return Status::Ok();
  std::set<std::string> survivors;
  if (j.contains("survivors") && j["survivors"].is_array()) {
    for (const json& id : j["survivors"]) {
      if (id.is_string()) survivors.insert(id.get<std::string>());
    }
  }
  const std::vector<uint8_t> aad = Aad(round_);
  json out = json::object();
  if (j.contains("shares") && j["shares"].is_object()) {
    for (const auto& [sender, sealed] : j["shares"].items()) {
      const auto n = std::find_if(neighbours_.begin(), neighbours_.end(),
                                  [&](const Neighbour& x) { return x.id == sender; });
      if (n == neighbours_.end() || !sealed.is_string()) {
        return Internal("secagg state: a share from '" + sender + "', not a neighbour");
      }
      SHOAL_ASSIGN_OR_RETURN(std::vector<uint8_t> box,
                             secagg::FromBase64(sealed.get<std::string>(), 0, "shares"));
      SHOAL_ASSIGN_OR_RETURN(const secagg::Seed key, ShareKey(*n));
      SHOAL_ASSIGN_OR_RETURN(std::vector<uint8_t> plain, secagg::Open(key, box, aad));
      const size_t want = kShareHead + 8 * (kKeyElements + kSeedElements);
      if (plain.size() != want || std::memcmp(plain.data(), kShareMagic, 4) != 0) {
        return Internal("share from " + sender + ": bad magic or length");
      }
      if (GetLe<uint32_t>(plain.data() + 4) != n->index ||
          GetLe<uint32_t>(plain.data() + 8) != index_ ||
          GetLe<uint64_t>(plain.data() + 12) != round_) {
        return Internal("share from " + sender + ": sealed for another pair or round");
      }
      const bool survived = survivors.count(sender) > 0;
      const size_t first = kShareHead + (survived ? 8 * kKeyElements : 0);
      const size_t count = survived ? kSeedElements : kKeyElements;
      json ys = json::array();
      for (size_t e = 0; e < count; ++e)
        ys.push_back(GetLe<uint64_t>(plain.data() + first + 8 * e));
      std::fill(plain.begin(), plain.end(), uint8_t{0});
      out[sender] = std::move(ys);
    }
  }
  const json body = {
      {"client_id", client_id_}, {"token", token_}, {"round", round_}, {"shares", out}};
  auto reply = http_.SecAggPost("unmask", body.dump());
  return reply.ok() ? Status::Ok() : reply.status();
}

}  // namespace shoal::client
