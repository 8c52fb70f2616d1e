// shoal-client's attacks: each rewrites the trained model exactly as attack.h says, and every
// malformed spec is refused naming it.
#include "shoal/client/attack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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
  auto err = [](const std::string& spec) { return ParseAttackSpec(spec).status().message(); };
  EXPECT_EQ(err("flip"),
            "attack \"flip\": unknown attack (none, sign-flip, label-flip, scale:<k>, "
            "noise:<sigma>)");
  EXPECT_EQ(err("label-flip:1"), "attack \"label-flip:1\": label-flip takes no argument");
  EXPECT_EQ(err("scale"), "attack \"scale\": scale needs a finite number, e.g. scale:-10");
  EXPECT_EQ(err("scale:x"), "attack \"scale:x\": scale needs a finite number, e.g. scale:-10");
  EXPECT_EQ(err("scale:1"), "attack \"scale:1\": scale:1 changes nothing");
  EXPECT_EQ(err("noise:0"), "attack \"noise:0\": sigma must be > 0");
  EXPECT_EQ(err("noise:inf"), "attack \"noise:inf\": noise needs a finite number, e.g. noise:0.5");
  EXPECT_EQ(err("sign-flip:2"), "attack \"sign-flip:2\": sign-flip takes no argument");
}

}  // namespace
}  // namespace shoal::client
