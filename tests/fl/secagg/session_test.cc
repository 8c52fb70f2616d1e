// A job's SecAgg+ rounds with C++ clients doing what the SDK does (fresh keys, sealed Shamir
// shares to their neighbours, masked inputs, unmask shares): with a dropout after each stage the
// unmasked sum equals the survivors' plaintext fixed-point sum exactly; too few survivors fail
// the round with the reason; replays, strangers and wrong shares are refused, naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "shoal/fl/secagg/secagg_session.h"

namespace shoal::secagg {
namespace {

using Json = nlohmann::json;

struct TestClient {
  std::string id;
  KeyPair c, s;
  Seed b{};
  std::vector<uint32_t> q;
  Json state;

  Json Advertisement() const {
    const auto commit = Sha256(b);
    return {{"c_pk", Base64(c.public_key)},
            {"s_pk", Base64(s.public_key)},
            {"b_commit", Base64(commit)}};
  }
  Seed ShareKey(const std::string& peer_c_pk) const {
    auto pk = FromBase64(peer_c_pk, 32, "c_pk");
    Key32 k;
    std::memcpy(k.data(), pk->data(), 32);
    auto shared = Agree(c.secret, k);
    Seed out;
    EXPECT_TRUE(Hkdf(*shared, kShareInfo, out).ok());
    return out;
  }
  Json Shares(uint32_t t) const {
    std::vector<uint64_t> xs;
    for (const auto& n : state["neighbours"]) xs.push_back(n["index"].get<uint64_t>() + 1);
    auto sk = Split(s.secret, xs, t);
    auto bs = Split(b, xs, t);
    Json out = Json::object();
    for (size_t i = 0; i < xs.size(); ++i) {
      std::vector<uint8_t> plain;
      for (uint64_t y : (*sk)[i].ys) plain.insert(plain.end(), (uint8_t*)&y, (uint8_t*)&y + 8);
      for (uint64_t y : (*bs)[i].ys) plain.insert(plain.end(), (uint8_t*)&y, (uint8_t*)&y + 8);
      const auto& n = state["neighbours"][i];
      auto sealed = Seal(ShareKey(n["c_pk"]), plain, {});
      out[n["id"].get<std::string>()] = Base64(*sealed);
    }
    return out;
  }
  std::vector<uint32_t> Masked() const {
    std::vector<SignedSeed> pairs;
    const uint32_t me = state["index"];
    for (const auto& n : state["neighbours"]) {
      const std::string id = n["id"];
      bool shared = false;
      for (const auto& x : state["shared"]) shared = shared || x == id;
      if (!shared) continue;
      auto pk = FromBase64(n["s_pk"].get<std::string>(), 32, "s_pk");
      Key32 k;
      std::memcpy(k.data(), pk->data(), 32);
      pairs.push_back({*PairwiseSeed(s.secret, k), PairSign(me, n["index"].get<uint32_t>())});
    }
    return *MaskInput(q, b, pairs);
  }
  Json UnmaskShares() const {
    Json out = Json::object();
    for (const auto& [from, sealed] : state["shares"].items()) {
      std::string c_pk;
      for (const auto& n : state["neighbours"]) {
        if (n["id"] == from) c_pk = n["c_pk"];
      }
      auto raw = FromBase64(sealed.get<std::string>(), 0, "share");
      auto plain = Open(ShareKey(c_pk), *raw, {});
      std::vector<uint64_t> ys(plain->size() / 8);
      std::memcpy(ys.data(), plain->data(), plain->size());
      bool survived = false;
      for (const auto& x : state["survivors"]) survived = survived || x == from;
      out[from] = survived ? std::vector<uint64_t>(ys.begin() + 5, ys.end())
                           : std::vector<uint64_t>(ys.begin(), ys.begin() + 5);
    }
    return out;
  }
};

class SecAggSessionTest : public ::testing::Test {
 protected:
  static constexpr size_t kN = 10, kParams = 5000;
  void SetUp() override {
    config_.threshold = 3;
    config_.neighbours = 6;
    config_.clip_range = 1.0;
    config_.bits = 16;
    config_.stage_timeout_s = 30;
    config_.clients = kN;
    ASSERT_TRUE(ValidateConfig(config_).ok());
    session_ = std::make_unique<SecAggSession>(config_);
    std::mt19937 rng(1);
    for (size_t i = 0; i < kN; ++i) {
      TestClient c;
      c.id = std::string(1, 'c').append(std::to_string(i + 1));
      c.c = *GenerateKeyPair();
      c.s = *GenerateKeyPair();
      ASSERT_TRUE(RandomBytes(c.b).ok());
      c.q.resize(kParams);
      for (auto& v : c.q) v = rng() % 65536;
      clients_.push_back(std::move(c));
    }
  }
  void Refresh(TestClient& c) {
    auto st = session_->State(c.id, round_);
    ASSERT_TRUE(st.ok()) << st.status().message();
    c.state = *st;
  }
  SecAggConfig config_;
  std::unique_ptr<SecAggSession> session_;
  std::vector<TestClient> clients_;
  uint64_t round_ = 0;
};

TEST_F(SecAggSessionTest, DropoutsAtEveryStageStillGiveTheExactSum) {
  double now = 0;
  for (auto& c : clients_) {
    auto r = session_->Advertise(c.id, 7, c.Advertisement(), now);
    ASSERT_TRUE(r.ok()) << r.status().message();
    round_ = (*r)["round"];
  }
  // c9 drops after advertising: it never shares.
  for (auto& c : clients_) {
    if (c.id == "c9") continue;
    Refresh(c);
    ASSERT_EQ(c.state["stage"], "share");
    Json body{{"round", round_}, {"shares", c.Shares(config_.threshold)}};
    auto r = session_->ShareKeys(c.id, body, now);
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  now += 31;
  EXPECT_FALSE(session_->OnTimer(now).close_input);  // closes the share stage
  // c8 drops after sharing: no input. c9 may not send one.
  EXPECT_EQ(session_->MayInput("c9", 7, now).code(), StatusCode::kPermissionDenied);
  std::vector<uint32_t> sum(kParams, 0), plain(kParams, 0);
  std::vector<std::string> inputs;
  for (auto& c : clients_) {
    if (c.id == "c8" || c.id == "c9") continue;
    ASSERT_TRUE(session_->MayInput(c.id, 7, now).ok());
    Refresh(c);
    ASSERT_EQ(c.state["stage"], "input");
    const auto y = c.Masked();
    for (size_t i = 0; i < kParams; ++i) {
      sum[i] += y[i];
      plain[i] += c.q[i];
    }
    inputs.push_back(c.id);
  }
  EXPECT_FALSE(session_->InputsComplete(7, 8));  // 9 shared
  EXPECT_FALSE(session_->UnmaskReady(7, inputs, now));
  // c7 drops after its input: it sends no unmask shares.
  for (auto& c : clients_) {
    if (c.id == "c7" || c.id == "c8" || c.id == "c9") continue;
    Refresh(c);
    ASSERT_EQ(c.state["stage"], "unmask");
    bool complete = true;
    auto r = session_->UnmaskShares(c.id, {{"round", round_}, {"shares", c.UnmaskShares()}}, now,
                                    &complete);
    ASSERT_TRUE(r.ok()) << c.id << ": " << r.status().message();
    EXPECT_FALSE(complete);
  }
  now += 31;
  EXPECT_TRUE(session_->OnTimer(now).commit_due);
  EXPECT_TRUE(session_->UnmaskReady(7, inputs, now));
  std::vector<float> values(kParams);
  uint64_t count = 0;
  Status st = session_->Unmask(7, sum, values, &count, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(count, 8u);
  EXPECT_EQ(sum, plain);  // exactly the survivors' fixed-point sum
  const Json status = session_->StatusJson();
  EXPECT_EQ(status["rounds"][0]["survivors"], 8);
  EXPECT_EQ(status["rounds"][0]["dropped"], 1);
}

TEST_F(SecAggSessionTest, RefusalsNameTheField) {
  for (size_t i = 0; i < kN; ++i) {
    auto& c = clients_[i];
    if (i == 1) {
      // A replayed key: c1's c_pk advertised by c2.
      Json replay = c.Advertisement();
      replay["c_pk"] = clients_[0].Advertisement()["c_pk"];
      auto r = session_->Advertise(c.id, 1, replay, 0);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
      EXPECT_EQ(r.status().message().substr(0, 44), "c_pk: this public key was already advertised");
    }
    if (i == 9) continue;  // c10 stays outside the graph
    auto r = session_->Advertise(c.id, 1, c.Advertisement(), 0);
    ASSERT_TRUE(r.ok()) << r.status().message();
    round_ = (*r)["round"];
  }
  auto twice = session_->Advertise("c1", 1, clients_[0].Advertisement(), 0);
  EXPECT_EQ(twice.status().message(),
            "client 'c1' already advertised keys for secure-aggregation round 1");
  auto bad = session_->Advertise("c10", 1, {{"c_pk", "AAAA"}}, 0);
  EXPECT_EQ(bad.status().message(), "c_pk: must be 32 bytes in base64, not 3");
  session_->OnTimer(31);  // advertisement closes with 9
  auto& c10 = clients_[9];
  auto outside = session_->ShareKeys("c10", {{"round", round_}, {"shares", Json::object()}}, 31);
  EXPECT_EQ(outside.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(outside.status().message(),
            "client: 'c10' is not in secure-aggregation round 1's graph (it did not advertise "
            "keys before the stage closed)");
  (void)c10;
  // A share for a client that is not a neighbour.
  auto& c1 = clients_[0];
  Refresh(c1);
  Json shares = c1.Shares(config_.threshold);
  std::string stranger;
  for (size_t i = 1; i < 9; ++i) {
    if (!shares.contains(clients_[i].id)) stranger = clients_[i].id;
  }
  ASSERT_FALSE(stranger.empty());
  shares[stranger] = shares.begin().value();
  auto r = session_->ShareKeys("c1", {{"round", round_}, {"shares", shares}}, 31);
  EXPECT_EQ(r.status().message(),
            "shares." + stranger + ": not a neighbour of c1 in round " + std::to_string(round_));
  auto stale = session_->ShareKeys("c1", {{"round", round_ + 5}, {"shares", shares}}, 31);
  EXPECT_EQ(stale.status().code(), StatusCode::kAlreadyExists);
}

TEST_F(SecAggSessionTest, WrongUnmaskShareIsRefusedAndTooFewSurvivorsFailTheRound) {
  double now = 0;
  for (auto& c : clients_)
    round_ = (*session_->Advertise(c.id, 3, c.Advertisement(), now))["round"];
  for (auto& c : clients_) {
    Refresh(c);
    ASSERT_TRUE(session_->ShareKeys(c.id, {{"round", round_}, {"shares", c.Shares(3)}}, now).ok());
  }
  std::vector<std::string> inputs;
  for (auto& c : clients_) inputs.push_back(c.id);
  EXPECT_TRUE(session_->InputsComplete(3, 10));
  EXPECT_FALSE(session_->UnmaskReady(3, inputs, now));
  // Every client answers; one share of the last is altered. By then each of its neighbours'
  // seeds is known from earlier answers, so the altered share is checked at once.
  for (size_t i = 0; i < kN; ++i) {
    auto& c = clients_[i];
    Refresh(c);
    Json shares = c.UnmaskShares();
    bool complete = false;
    if (i == kN - 1) {
      Json wrong = shares;
      auto it = wrong.begin();
      const std::string victim = it.key();
      (*it)[0] = ((*it)[0].get<uint64_t>() + 1) % kShamirPrime;
      auto r = session_->UnmaskShares(c.id, {{"round", round_}, {"shares", wrong}}, now, &complete);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      const std::string& msg = r.status().message();
      EXPECT_TRUE(msg.starts_with("shares.")) << msg;
      EXPECT_NE(msg.find(victim), std::string::npos) << msg;
    }
    auto r = session_->UnmaskShares(c.id, {{"round", round_}, {"shares", shares}}, now, &complete);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(complete, i == kN - 1);
  }
  // A second round where only 2 of 10 send masked inputs (threshold 3): refused, with why.
  for (auto& c : clients_) {
    c.c = *GenerateKeyPair();
    c.s = *GenerateKeyPair();
  }
  std::vector<uint32_t> sum(kParams);
  std::vector<float> out(kParams);
  uint64_t count = 0;
  ASSERT_TRUE(session_->Unmask(3, sum, out, &count, nullptr).ok());
  round_ = 0;
  for (auto& c : clients_)
    round_ = (*session_->Advertise(c.id, 4, c.Advertisement(), now))["round"];
  for (auto& c : clients_) {
    Refresh(c);
    ASSERT_TRUE(session_->ShareKeys(c.id, {{"round", round_}, {"shares", c.Shares(3)}}, now).ok());
  }
  EXPECT_TRUE(session_->UnmaskReady(4, {"c1", "c2"}, now) == false);
  now += 31;
  session_->OnTimer(now);
  Status st = session_->Unmask(4, sum, out, &count, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "secure-aggregation round 2 refused: 2 survivor(s), fewer than the threshold 3");
  EXPECT_EQ(session_->StatusJson()["rounds"][1]["stage"], "failed");
}

TEST(SecAggConfigTest, ValidationNamesTheField) {
  SecAggConfig c{.threshold = 5,
                 .neighbours = 4,
                 .clip_range = 1,
                 .bits = 16,
                 .stage_timeout_s = 1,
                 .clients = 10};
  EXPECT_EQ(ValidateConfig(c).message(),
            "spec.privacy.secureAggregation.threshold: 5 is more than neighbours (4): a client's "
            "secret is shared among its neighbours only");
  c.threshold = 3;
  c.neighbours = 5;
  EXPECT_EQ(ValidateConfig(c).message(),
            "spec.privacy.secureAggregation.neighbours: must be an even number >= 2 (the graph "
            "is k-regular)");
  c.neighbours = 4;
  c.bits = 31;
  EXPECT_EQ(ValidateConfig(c).message(),
            "spec.privacy.secureAggregation.bits: 10 clients x (2^31 - 1) overflows the 32-bit "
            "sum; lower bits or clients");
}

}  // namespace
}  // namespace shoal::secagg
