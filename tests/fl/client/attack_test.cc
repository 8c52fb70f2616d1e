// shoal-client's attacks: each rewrites the trained model exactly as attack.h says, and every
// malformed spec is refused naming it.
#include "shoal/tools/flsim/attack.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <utility>
#include <vector>

#include "shoal/tools/flsim/lie_board.h"

namespace shoal::client {
namespace {

TEST(Attack, SignFlipScaleAndNoiseRewriteTheDelta) {
  const std::vector<float> g = {1.0f, -2.0f, 0.5f, 0.0f};
  const std::vector<float> x = {1.5f, -2.25f, 0.5f, 4.0f};
  auto run = [&](const std::string& spec) {
    auto a = ParseAttackSpec(spec);
    EXPECT_TRUE(a.ok()) << a.status().message();
    std::vector<float> t = x;
    ApplyAttack(*a, g, t, 7);
    return t;
  };
  EXPECT_EQ(run("none"), x);
  EXPECT_EQ(run("sign-flip"), (std::vector<float>{0.5f, -1.75f, 0.5f, -4.0f}));
  EXPECT_EQ(run("scale:-10"), (std::vector<float>{-4.0f, 0.5f, 0.5f, -40.0f}));
  EXPECT_EQ(run("scale:3"), (std::vector<float>{2.5f, -2.75f, 0.5f, 12.0f}));
  // noise: g + N(0, sigma^2), independent of what was trained, reproducible from the seed.
  std::vector<float> big_g(20000, 3.0f), t1(20000, 100.0f), t2(20000, -5.0f);
  auto a = ParseAttackSpec("noise:0.5");
  ASSERT_TRUE(a.ok());
  ApplyAttack(*a, big_g, t1, 11);
  ApplyAttack(*a, big_g, t2, 11);
  EXPECT_EQ(t1, t2);
  double mean = 0, var = 0;
  for (float v : t1) mean += v - 3.0;
  mean /= t1.size();
  for (float v : t1) var += (v - 3.0 - mean) * (v - 3.0 - mean);
  var /= t1.size();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.02);
  EXPECT_EQ(ToString(*a), "noise:0.5");
  EXPECT_EQ(ToString(*ParseAttackSpec("scale:-10")), "scale:-10");
  EXPECT_EQ(ToString(*ParseAttackSpec("sign-flip")), "sign-flip");
  // label-flip: the labels flipped, the trained update sent as it is.
  auto lf = ParseAttackSpec("label-flip");
  ASSERT_TRUE(lf.ok());
  EXPECT_EQ(ToString(*lf), "label-flip");
  std::vector<float> t = x;
  ApplyAttack(*lf, g, t, 1);
  EXPECT_EQ(t, x);
  std::vector<uint8_t> labels = {0, 3, 9, 5};
  FlipLabels(labels, 10);
  EXPECT_EQ(labels, (std::vector<uint8_t>{9, 6, 0, 4}));
}

TEST(Attack, BadSpecsAreRefusedNamingThem) {
  const std::pair<const char*, const char*> kRefused[] = {
      {"flip",
       "attack \"flip\": unknown attack (none, sign-flip, label-flip, scale:<k>, "
       "noise:<sigma>, lie[:<z>])"},
      {"lie:", "attack \"lie:\": lie needs a finite number, e.g. lie:1.5"},
      {"lie:0", "attack \"lie:0\": z must be > 0"},
      {"lie:-1", "attack \"lie:-1\": z must be > 0"},
      {"label-flip:1", "attack \"label-flip:1\": label-flip takes no argument"},
      {"scale", "attack \"scale\": scale needs a finite number, e.g. scale:-10"},
      {"scale:x", "attack \"scale:x\": scale needs a finite number, e.g. scale:-10"},
      {"scale:1", "attack \"scale:1\": scale:1 changes nothing"},
      {"noise:0", "attack \"noise:0\": sigma must be > 0"},
      {"noise:inf", "attack \"noise:inf\": noise needs a finite number, e.g. noise:0.5"},
      {"sign-flip:2", "attack \"sign-flip:2\": sign-flip takes no argument"},
  };
  for (const auto& [spec, message] : kRefused) {
    EXPECT_EQ(ParseAttackSpec(spec).status().message(), message);
  }
}

TEST(Attack, LieSpecsParse) {
  auto lie = ParseAttackSpec("lie");
  ASSERT_TRUE(lie.ok());
  EXPECT_EQ(lie->kind, AttackSpec::Kind::kLie);
  EXPECT_EQ(lie->value, 0.0);  // z from LieZ(n, f)
  EXPECT_EQ(ToString(*lie), "lie");
  auto z = ParseAttackSpec("lie:1.5");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->value, 1.5);
  EXPECT_EQ(ToString(*z), "lie:1.5");
  // ApplyAttack leaves a lie attacker's model to the pool.
  std::vector<float> t = {1, 2};
  ApplyAttack(*z, std::vector<float>{0, 0}, t, 1);
  EXPECT_EQ(t, (std::vector<float>{1, 2}));
}

// z_max = Phi^-1((n - s) / n), s = floor(n/2 + 1) - f, each worked by hand:
//   n 10, f 2: s = 6 - 2 = 4, Phi^-1(6/10)  = 0.25335 (normal table: Phi(0.25) = 0.5987,
//                                                       Phi(0.26) = 0.6026)
//   n 8,  f 2: s = 5 - 2 = 3, Phi^-1(5/8)   = 0.31864 (Phi(0.31) = 0.6217, Phi(0.32) = 0.6255)
//   n 50, f 12: s = 26 - 12 = 14, Phi^-1(36/50) = 0.58284 (Phi(0.58) = 0.7190, Phi(0.59) = 0.7224)
//   n 51, f 12: s = floor(26.5) - 12 = 14, Phi^-1(37/51) = 0.59923
//   n 4,  f 1: s = 3 - 1 = 2, Phi^-1(1/2) = 0 exactly
TEST(Attack, LieZIsThePapersZMax) {
  EXPECT_NEAR(*LieZ(10, 2), 0.2533471031357998, 1e-12);
  EXPECT_NEAR(*LieZ(5, 1), 0.2533471031357998, 1e-12);  // s = 2, 3/5
  EXPECT_NEAR(*LieZ(8, 2), 0.3186393639643751, 1e-12);
  EXPECT_NEAR(*LieZ(50, 12), 0.5828415072712162, 1e-12);
  EXPECT_NEAR(*LieZ(51, 12), 0.5992298680993445, 1e-12);
  EXPECT_NEAR(*LieZ(4, 1), 0.0, 1e-15);
  EXPECT_NEAR(InverseNormalCdf(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(InverseNormalCdf(0.025), -1.959963984540054, 1e-12);
  // Phi(z) = erfc(-z / sqrt 2) / 2 gives the probability back.
  EXPECT_NEAR(0.5 * std::erfc(-*LieZ(10, 2) / std::sqrt(2.0)), 0.6, 1e-15);
  EXPECT_EQ(LieZ(10, 6).status().message(),
            "lie: 6 attackers of 10 clients need no supporters (s = floor(n/2 + 1) - f = 0): "
            "z_max is unbounded, give one as lie:<z>");
  EXPECT_EQ(LieZ(10, 0).status().message(),
            "lie: z_max needs 1 <= attackers < clients (got 0 of 10)");
  EXPECT_EQ(LieZ(10, 10).status().message(),
            "lie: z_max needs 1 <= attackers < clients (got 10 of 10)");
}

// mean - z * sample std per coordinate, by hand:
//   (1, 2, 3):    mean 2,  var (1 + 0 + 1) / 2 = 1,   std 1 -> 2 - 0.5 = 1.5
//   (-1, 2, 5):   mean 2,  var (9 + 0 + 9) / 2 = 9,   std 3 -> 2 - 1.5 = 0.5
//   (4, 4, 4):    std 0 -> 4
//   (10, 10, 16): mean 12, var (4 + 4 + 16) / 2 = 12 -> 12 - 0.5 sqrt(12)
TEST(Attack, LittleIsEnoughSendsMeanMinusZStd) {
  const std::vector<float> m1 = {1, -1, 4, 10}, m2 = {2, 2, 4, 10}, m3 = {3, 5, 4, 16};
  const std::vector<std::span<const float>> three = {m1, m2, m3};
  std::vector<float> out(4);
  LittleIsEnough(three, 0.5, out);
  EXPECT_FLOAT_EQ(out[0], 1.5f);
  EXPECT_FLOAT_EQ(out[1], 0.5f);
  EXPECT_FLOAT_EQ(out[2], 4.0f);
  EXPECT_FLOAT_EQ(out[3], static_cast<float>(12 - 0.5 * std::sqrt(12.0)));
  // Two models (1, 3), z 1: mean 2, std sqrt(2 / 1).
  const std::vector<float> a = {1}, b = {3};
  const std::vector<std::span<const float>> two = {a, b};
  std::vector<float> one(1);
  LittleIsEnough(two, 1.0, one);
  EXPECT_FLOAT_EQ(one[0], static_cast<float>(2 - std::sqrt(2.0)));
  // The same as g + mean(delta) - z std(delta) for the deltas from any g.
  const std::vector<float> g = {0.25f, -3, 1, 7};
  std::vector<float> d1(4), d2(4), d3(4), via_deltas(4);
  for (int i = 0; i < 4; ++i) {
    d1[i] = m1[i] - g[i];
    d2[i] = m2[i] - g[i];
    d3[i] = m3[i] - g[i];
  }
  const std::vector<std::span<const float>> deltas = {d1, d2, d3};
  LittleIsEnough(deltas, 0.5, via_deltas);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(g[i] + via_deltas[i], out[i], 1e-5) << i;
}

// The attackers of a round all send the same model, computed from every one's honest model.
TEST(LieBoard, TheRoundsAttackersAllSendMeanMinusZStdOfTheirModels) {
  LieBoard board(3, 0.5, std::chrono::hours(1));
  std::vector<std::vector<float>> models = {{1, -1, 4, 10}, {2, 2, 4, 10}, {3, 5, 4, 16}};
  std::vector<int> met(3);
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] { met[k] = board.Collude(7, models[k]); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(met, (std::vector<int>{3, 3, 3}));
  const std::vector<float> want = {1.5f, 0.5f, 4.0f,
                                   static_cast<float>(12 - 0.5 * std::sqrt(12.0))};
  for (const auto& m : models) EXPECT_EQ(m, want);
  // An attacker arriving after the round was decided sends the same model.
  std::vector<float> late = {100, 100, 100, 100};
  EXPECT_EQ(board.Collude(7, late), 3);
  EXPECT_EQ(late, want);
}

TEST(LieBoard, ThoseWhoMetColludeAndOneAloneSendsItsHonestModel) {
  auto wait_for = [](LieBoard& board, uint64_t version, int n) {
    while (board.Waiting(version) < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  {
    // Two of three attackers deposit for version 2; a deposit for version 3 shows the round
    // has moved on, so those two collude between themselves.
    LieBoard board(3, 1.0, std::chrono::hours(1));
    std::vector<float> a = {1}, b = {3}, c = {9};
    int met_a = -1, met_b = -1, met_c = -1;
    std::thread ta([&] { met_a = board.Collude(2, a); });
    std::thread tb([&] { met_b = board.Collude(2, b); });
    wait_for(board, 2, 2);
    std::thread tc([&] { met_c = board.Collude(3, c); });
    ta.join();
    tb.join();
    EXPECT_EQ(met_a, 2);
    EXPECT_EQ(met_b, 2);
    EXPECT_FLOAT_EQ(a[0], static_cast<float>(2 - std::sqrt(2.0)));
    EXPECT_EQ(a, b);
    board.Stop();  // version 3's attacker is still waiting for its colluders
    tc.join();
    EXPECT_EQ(met_c, 0);
    EXPECT_EQ(c, (std::vector<float>{9}));
    std::vector<float> after = {1, 2};
    EXPECT_EQ(board.Collude(9, after), 0);
    EXPECT_EQ(after, (std::vector<float>{1, 2}));
  }
  {
    // One attacker whose colluders never come: after the wait it sends its honest model.
    LieBoard board(2, 1.0, std::chrono::milliseconds(5));
    std::vector<float> alone = {5, 6};
    EXPECT_EQ(board.Collude(4, alone), 1);
    EXPECT_EQ(alone, (std::vector<float>{5, 6}));
  }
}

}  // namespace
}  // namespace shoal::client
