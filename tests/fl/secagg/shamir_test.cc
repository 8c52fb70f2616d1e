// Shamir over GF(2^61 - 1): any t of the shares reconstruct the secret, t - 1 are refused, a
// share off the polynomial is named.
#include "shoal/fl/secagg/shamir.h"

#include <gtest/gtest.h>

#include <numeric>

namespace shoal::secagg {
namespace {

TEST(Shamir, AnyThresholdSharesReconstructAndFewerAreRefused) {
  std::vector<uint8_t> secret(32);
  std::iota(secret.begin(), secret.end(), uint8_t{200});  // wraps: bytes up to 255
  const uint64_t xs[] = {1, 2, 3, 5, 8, 13};
  constexpr size_t kT = 3;
  auto shares = Split(secret, xs, kT);
  ASSERT_TRUE(shares.ok());
  ASSERT_EQ((*shares)[0].ys.size(), ShareElements(32));
  size_t subsets = 0;
  for (int mask = 0; mask < 64; ++mask) {
    std::vector<Share> pick;
    for (int i = 0; i < 6; ++i) {
      if (mask & (1 << i)) pick.push_back((*shares)[i]);
    }
    auto got = Combine(pick, kT, secret.size());
    if (pick.size() < kT) {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().message(),
                "shamir: " + std::to_string(pick.size()) + " share(s), 3 needed");
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, secret);
    ++subsets;
  }
  EXPECT_EQ(subsets, 42u);  // C(6,3) + C(6,4) + C(6,5) + C(6,6)
}

TEST(Shamir, AWrongExtraShareIsNamed) {
  const std::vector<uint8_t> secret(16, 0xab);
  const uint64_t xs[] = {1, 2, 3, 4};
  auto shares = Split(secret, xs, 2);
  ASSERT_TRUE(shares.ok());
  (*shares)[3].ys[1] ^= 1;
  uint64_t bad = 0;
  auto got = Combine(*shares, 2, secret.size(), &bad);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(bad, 4u);
  EXPECT_EQ(got.status().message(),
            "shamir: the share at point 4 does not lie on the polynomial of the others");
}

TEST(Shamir, DuplicatePointsAndOutOfFieldElementsAreRefused) {
  const std::vector<uint8_t> secret(16, 1);
  const uint64_t xs[] = {1, 2, 3};
  auto shares = Split(secret, xs, 2);
  ASSERT_TRUE(shares.ok());
  std::vector<Share> dup = {(*shares)[0], (*shares)[0]};
  EXPECT_FALSE(Combine(dup, 2, 16).ok());
  std::vector<Share> big = {(*shares)[0], (*shares)[1]};
  big[1].ys[0] = kShamirPrime;
  EXPECT_FALSE(Combine(big, 2, 16).ok());
}

TEST(Shamir, FieldInverse) {
  for (uint64_t a : {uint64_t{1}, uint64_t{2}, uint64_t{12345}, kShamirPrime - 1}) {
    EXPECT_EQ(FieldMul(a, FieldInv(a)), 1u) << a;
  }
}

}  // namespace
}  // namespace shoal::secagg
