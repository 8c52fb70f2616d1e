// Secure aggregation's primitives: known answers shared with the Python SDK's test
// (shoal/fl/sdk/python/tests/test_secagg.py asserts the same digests), so the masks a Python
// client adds are the ones the server removes, bit for bit; the u32 fold on every path.
#include "shoal/fl/secagg/crypto.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/kernels/fold_u32.h"
#include "shoal/fl/kernels/worker_team.h"
#include "shoal/fl/secagg/masking.h"

namespace shoal::secagg {
namespace {

std::string Digest(const std::vector<uint32_t>& v) {
  return Hex(Sha256(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4)));
}

Seed CountingSeed() {
  Seed s;
  std::iota(s.begin(), s.end(), uint8_t{0});
  return s;
}

TEST(SecAggCrypto, MaskMatchesThePythonSdkBitForBit) {
  auto m = Mask(CountingSeed(), 1000);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)[0], 926654918u);
  EXPECT_EQ((*m)[1], 2187038599u);
  EXPECT_EQ(Digest(*m), "f9e8b5d69dc58495cb45edf27adcc30e7af0bbb9abdeb08f03afe7433b21d0ff");
}

TEST(SecAggCrypto, PairwiseSeedIsSymmetricAndMatchesPython) {
  Key32 a, b;
  a.fill(1);
  b.fill(2);
  auto pa = PublicKeyOf(a), pb = PublicKeyOf(b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(Hex(*pa), "a4e09292b651c278b9772c569f5fa9bb13d906b46ab68c9df9dc2b4409f8a209");
  auto ab = PairwiseSeed(a, *pb), ba = PairwiseSeed(b, *pa);
  ASSERT_TRUE(ab.ok() && ba.ok());
  EXPECT_EQ(Hex(*ab), "3554d0fc306936c9805e4864d5232c76");
  EXPECT_EQ(*ab, *ba);
  // A masked input as the SDK computes it: q + PRG(b) + PRG(s_ab) - PRG(7...7).
  std::vector<uint32_t> q(1000);
  for (uint32_t i = 0; i < q.size(); ++i) q[i] = i % 65536;
  Seed seven;
  seven.fill(7);
  const SignedSeed pairs[] = {{*ab, +1}, {seven, -1}};
  auto y = MaskInput(q, CountingSeed(), pairs);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Digest(*y), "afebebb11d8d4050c9a6410f73c4f2e6453295c2eda288d4b90d6662dfed7ab3");
}

TEST(SecAggCrypto, QuantizeMatchesPython) {
  const float x[] = {-2, -1, -0.5f, 0, 0.3f, 1, 5};
  uint32_t q[7];
  Quantizer{1.0, 16}.Quantize(x, q);
  const uint32_t want[] = {0, 0, 16384, 32768, 42598, 65535, 65535};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(q[i], want[i]) << i;
}

TEST(SecAggCrypto, MaskAddFromAnyOffsetEqualsTheWholeMask) {
  auto whole = Mask(CountingSeed(), 1003);
  ASSERT_TRUE(whole.ok());
  for (uint64_t begin : {0u, 1u, 3u, 4u, 5u, 17u, 1000u}) {
    std::vector<uint32_t> part(1003 - begin, 0);
    ASSERT_TRUE(MaskAdd(CountingSeed(), +1, begin, part).ok());
    for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], (*whole)[begin + i]) << begin;
    ASSERT_TRUE(MaskAdd(CountingSeed(), -1, begin, part).ok());
    for (uint32_t v : part) ASSERT_EQ(v, 0u);
  }
}

TEST(SecAggCrypto, ApplyMasksOnManyThreadsEqualsOneThread) {
  std::vector<uint32_t> one(300001, 5), many(300001, 5);
  Seed other;
  other.fill(9);
  const SignedSeed seeds[] = {{CountingSeed(), +1}, {other, -1}};
  ASSERT_TRUE(ApplyMasks(one, seeds, nullptr).ok());
  aggregator::WorkerTeam team(4);
  ASSERT_TRUE(ApplyMasks(many, seeds, &team).ok());
  EXPECT_EQ(one, many);
}

TEST(SecAggCrypto, SealOpensOnlyWithTheKeyAndAad) {
  const Seed key = CountingSeed();
  const uint8_t msg[] = {1, 2, 3, 4, 5};
  const uint8_t aad[] = {9};
  auto sealed = Seal(key, msg, aad);
  ASSERT_TRUE(sealed.ok());
  auto opened = Open(key, *sealed, aad);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, std::vector<uint8_t>(msg, msg + 5));
  const uint8_t other_aad[] = {8};
  EXPECT_FALSE(Open(key, *sealed, other_aad).ok());
  (*sealed)[14] ^= 1;
  EXPECT_FALSE(Open(key, *sealed, aad).ok());
}

TEST(SecAggCrypto, Base64RoundTripAndRefusals) {
  const std::vector<uint8_t> b = {0, 1, 2, 250, 251};
  auto back = FromBase64(Base64(b), 5, "x");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, b);
  auto wrong = FromBase64(Base64(b), 32, "c_pk");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "c_pk: must be 32 bytes in base64, not 5");
  EXPECT_FALSE(FromBase64("abc", 0, "x").ok());
}

TEST(SecAggFold, U32FoldWrapsAndEveryPathAgrees) {
  std::mt19937 rng(7);
  for (size_t n : {0u, 1u, 7u, 31u, 33u, 64u, 1000u, 4099u}) {
    std::vector<uint32_t> x(n + 1), acc(n);
    for (auto& v : x) v = rng();
    for (auto& v : acc) v = rng();
    std::vector<uint32_t> want = acc;
    for (size_t i = 0; i < n; ++i) want[i] += x[i + 1];  // wraps modulo 2^32
    for (aggregator::Isa isa :
         {aggregator::Isa::kScalar, aggregator::Isa::kAvx2, aggregator::Isa::kAvx512}) {
      if (!aggregator::IsaSupported(isa)) continue;
      std::vector<uint32_t> got = acc;
      // Unaligned input: one element in.
      aggregator::FoldU32WithIsa(isa, got.data(), x.data() + 1, n);
      EXPECT_EQ(got, want) << aggregator::IsaName(isa) << " n=" << n;
    }
  }
  std::vector<uint32_t> big(1 << 18, 0xffffffffu), add(1 << 18, 2);
  aggregator::FoldPool pool(3);
  pool.FoldU32(big.data(), add.data(), big.size());
  for (uint32_t v : big) ASSERT_EQ(v, 1u);
}

TEST(SecAggGraph, KRegularSymmetricAndSeeded) {
  for (uint32_t n : {5u, 10u, 100u}) {
    const auto g = NeighbourGraph(n, 4, 42);
    for (uint32_t i = 0; i < n; ++i) {
      EXPECT_EQ(g[i].size(), 4u);
      for (uint32_t j : g[i]) {
        EXPECT_NE(i, j);
        EXPECT_TRUE(std::binary_search(g[j].begin(), g[j].end(), i));
      }
    }
    EXPECT_EQ(g, NeighbourGraph(n, 4, 42));
  }
  EXPECT_NE(NeighbourGraph(100, 4, 1), NeighbourGraph(100, 4, 2));
  const auto all = NeighbourGraph(4, 6, 1);  // k >= n - 1: everyone
  EXPECT_EQ(all[0], (std::vector<uint32_t>{1, 2, 3}));
}

}  // namespace
}  // namespace shoal::secagg
