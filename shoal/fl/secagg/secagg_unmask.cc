// SecAggSession's last stage: the survivors' shares collected (UnmaskShares), the plan of
// which seeds to rebuild and which masks to take off (PlanUnmask, under the job's lock), the
// masks taken off the summed u32 vector and the result decoded (ApplyUnmask, Unmask: no lock).
#include <algorithm>
#include <cstring>

#include "shoal/fl/secagg/secagg_session.h"

namespace shoal::secagg {

Result<nlohmann::json> SecAggSession::UnmaskShares(const std::string& client, const Json& body,
                                                   double now, bool* complete) {
  *complete = false;
  Round* r = Current();
  if (r == nullptr) return NotFound("no secure-aggregation round is open");
  SHOAL_RETURN_IF_ERROR(CheckRound(*r, body));
  auto it = r->index.find(client);
  if (it == r->index.end()) {
    return PermissionDenied("client: '" + client + "' is not in secure-aggregation round " +
                            std::to_string(r->id) + "'s graph");
  }
  if (r->stage != Stage::kUnmask) {
    return AlreadyExists(std::string("secure-aggregation round ") + std::to_string(r->id) +
                         " is not unmasking (stage " + StageName(r->stage) + ")");
  }
  const uint32_t self = it->second;
  Participant& me = r->parts[self];
  if (!me.input) {
    return PermissionDenied("client: '" + client + "' is not a survivor of round " +
                            std::to_string(r->id) + " (its masked input was not folded)");
  }
  if (me.answered) {
    return AlreadyExists("client '" + client + "' already sent its unmask shares for round " +
                         std::to_string(r->id));
  }
  if (!body.contains("shares") || !body["shares"].is_object()) {
    return InvalidArgument("shares: required (an object: neighbour id -> field elements)");
  }
  // Validate everything first, then apply: a refused body changes nothing.
  struct Pending {
    uint32_t owner;
    bool self_mask;  // b (a survivor's) or the mask key (a dropout's)
    Share share;
  };
  std::vector<Pending> pending;
  for (const auto& [of, value] : body["shares"].items()) {
    const std::string field = "shares." + of.substr(0, 64);
    auto o = r->index.find(of);
    if (o == r->index.end() || !IsNeighbour(*r, self, o->second) || !r->parts[o->second].shared) {
      return InvalidArgument(field + ": " + of.substr(0, 64) + " is not a neighbour of " + client +
                             " that shared keys in round " + std::to_string(r->id));
    }
    const bool self_mask = r->parts[o->second].input;
    const size_t want = ShareElements(self_mask ? kSeedBytes : kKeyBytes);
    if (!value.is_array() || value.size() != want) {
      return InvalidArgument(field + ": must be " + std::to_string(want) +
                             " field elements (the share of its " +
                             (self_mask ? "self-mask seed" : "mask key") + ")");
    }
    Share s;
    s.x = self + 1;
    for (const auto& e : value) {
      if (!e.is_number_unsigned() || e.get<uint64_t>() >= kShamirPrime) {
        return InvalidArgument(field + ": elements must be integers below 2^61 - 1");
      }
      s.ys.push_back(e.get<uint64_t>());
    }
    pending.push_back({o->second, self_mask, std::move(s)});
  }
  for (uint32_t n : r->graph[self]) {
    if (!r->parts[n].shared) continue;
    const bool given =
        std::any_of(pending.begin(), pending.end(), [n](const Pending& p) { return p.owner == n; });
    if (!given) return InvalidArgument("shares." + r->parts[n].id + ": missing");
  }
  // A share is checked as soon as its owner's secret is known: against the polynomial of the
  // threshold shares that reconstructed it, or, as the threshold-th, against what the owner
  // advertised (its public mask key, or the SHA-256 of its self-mask seed).
  std::map<uint32_t, Seed> new_b;
  std::map<uint32_t, Key32> new_sk;
  for (const Pending& p : pending) {
    const std::string field = "shares." + r->parts[p.owner].id;
    std::vector<Share> all = p.self_mask ? r->b_shares[p.owner] : r->sk_shares[p.owner];
    if (all.size() + 1 < config_.threshold) continue;
    all.push_back(p.share);
    const size_t bytes = p.self_mask ? kSeedBytes : kKeyBytes;
    if (all.size() > config_.threshold) {
      // Known secret: the new share must lie on the same polynomial.
      std::vector<Share> check(all.begin(), all.begin() + config_.threshold);
      check.push_back(p.share);
      if (!Combine(check, config_.threshold, bytes).ok()) {
        return InvalidArgument(field + ": does not match the secret the other " +
                               std::to_string(config_.threshold) + " shares reconstruct");
      }
      continue;
    }
    auto secret = Combine(all, config_.threshold, bytes);
    bool good = secret.ok();
    if (good && p.self_mask) {
      good = Sha256(*secret) == r->parts[p.owner].b_commit;
      if (good) std::memcpy(new_b[p.owner].data(), secret->data(), kSeedBytes);
    } else if (good) {
      Key32 sk;
      std::memcpy(sk.data(), secret->data(), kKeyBytes);
      auto pk = PublicKeyOf(sk);
      good = pk.ok() && *pk == r->parts[p.owner].s_pk;
      if (good) new_sk[p.owner] = sk;
    }
    if (!good) {
      return InvalidArgument(field + ": with the " + std::to_string(config_.threshold - 1) +
                             " share(s) before it, does not reconstruct " + r->parts[p.owner].id +
                             "'s " +
                             (p.self_mask ? "self-mask seed (its commitment does not match)"
                                          : "mask key (its public key does not match)"));
    }
  }
  for (Pending& p : pending) {
    (p.self_mask ? r->b_shares : r->sk_shares)[p.owner].push_back(std::move(p.share));
  }
  for (auto& [o, s] : new_b) r->b_seed[o] = s;
  for (auto& [o, k] : new_sk) r->sk[o] = k;
  me.answered = true;
  r->stage_since = now;
  *complete = std::all_of(r->parts.begin(), r->parts.end(),
                          [](const Participant& p) { return !p.input || p.answered; });
  return Json{{"round", r->id}, {"accepted", pending.size()}};
}

Result<SecAggSession::UnmaskPlan> SecAggSession::PlanUnmask(uint64_t coord_round) {
  Round* r = nullptr;
  for (Round& x : rounds_) {
    if (x.coord_round == coord_round &&
        (x.stage == Stage::kUnmask || x.stage == Stage::kDone || x.stage == Stage::kFailed)) {
      r = &x;
    }
  }
  if (r == nullptr) {
    return Unavailable("no secure-aggregation round unmasks coordinator round " +
                       std::to_string(coord_round));
  }
  auto fail = [&](const std::string& why) {
    FailRound(*r, why);
    return Unavailable("secure-aggregation round " + std::to_string(r->id) + " refused: " + why);
  };
  if (r->stage == Stage::kFailed) return fail(r->failure);
  UnmaskPlan plan;
  plan.round = r->id;
  plan.quantizer = Quantizer{config_.clip_range, config_.bits};
  for (const Participant& p : r->parts) {
    plan.survivors += p.shared && p.input;
    plan.dropped += p.shared && !p.input;
  }
  if (plan.survivors < config_.threshold) {
    return fail(std::to_string(plan.survivors) + " survivor(s), fewer than the threshold " +
                std::to_string(config_.threshold));
  }
  for (uint32_t i = 0; i < r->parts.size(); ++i) {
    const Participant& p = r->parts[i];
    if (!p.shared || !p.input) continue;
    auto b = r->b_seed.find(i);
    if (b == r->b_seed.end()) {
      return fail(p.id + "'s self-mask seed: " + std::to_string(r->b_shares[i].size()) +
                  " share(s) of threshold " + std::to_string(config_.threshold) + " arrived");
    }
    plan.seeds.push_back({b->second, -1});
  }
  for (uint32_t d = 0; d < r->parts.size(); ++d) {
    const Participant& p = r->parts[d];
    if (!p.shared || p.input) continue;
    auto sk = r->sk.find(d);
    if (sk == r->sk.end()) {
      return fail(p.id + " dropped after sharing and its mask key has " +
                  std::to_string(r->sk_shares[d].size()) + " share(s) of threshold " +
                  std::to_string(config_.threshold));
    }
    for (uint32_t i : r->graph[d]) {
      if (!r->parts[i].input) continue;
      auto seed = PairwiseSeed(sk->second, r->parts[i].s_pk);
      if (!seed.ok()) return fail(seed.status().message());
      plan.seeds.push_back({*seed, -PairSign(i, d)});
    }
  }
  return plan;
}

Status SecAggSession::ApplyUnmask(const UnmaskPlan& plan, std::span<uint32_t> sum,
                                  std::span<float> out, aggregator::WorkerTeam* team,
                                  std::string* sum_sha256) {
  SHOAL_RETURN_IF_ERROR(ApplyMasks(sum, plan.seeds, team));
  *sum_sha256 =
      Hex(Sha256(std::span(reinterpret_cast<const uint8_t*>(sum.data()), sum.size() * 4)));
  plan.quantizer.DecodeSum(sum, plan.survivors, out);
  return Status::Ok();
}

void SecAggSession::Finish(const UnmaskPlan& plan, const Status& result,
                           const std::string& sum_sha256) {
  for (Round& r : rounds_) {
    if (r.id != plan.round) continue;
    if (!result.ok()) {
      if (r.stage != Stage::kFailed) FailRound(r, result.message());
      return;
    }
    r.sum_sha256 = sum_sha256;
    r.survivors = static_cast<uint32_t>(plan.survivors);
    r.dropped = static_cast<uint32_t>(plan.dropped);
    r.stage = Stage::kDone;
  }
}

Status SecAggSession::Unmask(uint64_t coord_round, std::span<uint32_t> sum, std::span<float> out,
                             uint64_t* count, aggregator::WorkerTeam* team) {
  auto plan = PlanUnmask(coord_round);
  if (!plan.ok()) return plan.status();
  std::string digest;
  Status st = ApplyUnmask(*plan, sum, out, team, &digest);
  Finish(*plan, st, digest);
  *count = plan->survivors;
  return st;
}

}  // namespace shoal::secagg
