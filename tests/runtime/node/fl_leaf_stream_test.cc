// The FL leaf folding an update while its body arrives (OnBodyArriving, streamed_fold.h): the
// partial sum equals the whole-update fold's bit for bit however the body is cut (a cut inside
// a value, inside a Q8/Q4 block, 1-byte steps at the head), a bad value found late is refused
// with the whole fold's message and the reply marked (the coordinator rebuilds the partial
// sum), and a client that leaves mid-body is answered with its update's fold marked the same
// way, the next update at that buffer folding whole.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pool_requests.h"
#include "shoal/common/payload.h"
#include "shoal/fl/leaf/fl_leaf_handler.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal {
namespace {

using model::DType;

class FlLeafStream : public PoolRequestsTest {
 protected:
  void SetUp() override { MakePool("shoal-leaf-stream-test-", 64 << 20); }

  // An update of the model (784-256-10, 203k values: the fold's threads split fc1.weight)
  // whose values are pseudo-random (seeded), in `d`.
  std::string Update(uint32_t seed, DType d, float poison_at_end = 0, bool poison = false) {
    model::Model m(spec_);
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    for (float& v : m.values) v = dist(rng);
    if (poison) m.values.back() = poison_at_end;
    model::UpdateMeta meta;
    meta.job = "j";
    meta.client_id = "c" + std::to_string(seed);
    meta.num_samples = 10;
    auto body = model::EncodeUpdate(meta, m, d);
    EXPECT_TRUE(body.ok());
    return std::string(reinterpret_cast<const char*>(body->data()), body->size());
  }
  std::unique_ptr<Handler> Leaf() {
    FlLeafOptions o;
    o.device = LeafFoldDevice::kCpu;
    o.wire_formats = {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8, DType::kQ4};
    auto h = CreateFlLeafHandler(spec_, o, nullptr);
    EXPECT_TRUE(h->OnInstanceStart().ok());
    return h;
  }
  // Starts every partial sum from the same non-zero values.
  std::vector<float> Start() {
    std::vector<float> acc(spec_.num_params());
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : acc) v = dist(rng);
    return acc;
  }
  // The update's request: announced to `h` at each of `cuts` (bytes of the body, increasing),
  // then handled (unless `gone`: the client left). The status, and whether the reply says the
  // partial sum changed.
  Status Send(Handler& h, const std::string& update, std::vector<float>& acc, float w,
              const std::vector<uint64_t>& cuts, bool* aux_changed = nullptr, bool gone = false,
              std::vector<float>* before_handle = nullptr) {
    const uint64_t req = MakeRequest(update, "application/octet-stream");
    Request r = View(req);
    r.aux = std::as_writable_bytes(std::span<float>(acc));
    r.aux_value = w;
    for (uint64_t cut : cuts) {
      r.arrived = cut;
      h.OnBodyArriving(r);
    }
    if (before_handle != nullptr) *before_handle = acc;
    r.arrived = r.body.size();
    r.client_gone = gone;
    ResponseBuilder rb(*pool_, 1, req);
    Status st = h.Handle(r, rb);
    if (aux_changed != nullptr) *aux_changed = rb.aux_changed();
    if (st.ok()) {
      EXPECT_EQ(rb.status(), 202);
      auto fin = rb.Finish();
      EXPECT_TRUE(fin.ok());
      if (fin.ok()) (void)pool_->Release(fin->first, 1);
    } else {
      (void)pool_->Release(req, 1);
    }
    return st;
  }
  // Cuts every `step` bytes up to `size` (exclusive), after 1-byte steps through the head.
  static std::vector<uint64_t> Cuts(uint64_t size, uint64_t step, uint64_t head_bytes = 0) {
    std::vector<uint64_t> cuts;
    for (uint64_t c = 1; c < head_bytes; ++c) cuts.push_back(c);
    for (uint64_t c = std::max<uint64_t>(head_bytes, step); c < size; c += step) cuts.push_back(c);
    return cuts;
  }

  model::ModelSpec spec_ = model::MlpSpec(784, {256}, 10);
};

TEST_F(FlLeafStream, ChunkedFoldEqualsTheWholeFoldBitForBit) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8, DType::kQ4}) {
    SCOPED_TRACE(std::string(DTypeName(d)));
    const std::string update = Update(7, d);
    auto h = Leaf();
    std::vector<float> whole = Start();
    ASSERT_TRUE(Send(*h, update, whole, 0.37f, {}).ok());
    ASSERT_NE(whole, Start());
    // 1001: cuts inside values and Q8 blocks (68 bytes) and Q4 blocks (36 bytes); 65 and 4099
    // likewise; 1 MiB + 3 as the gateway announces; 1-byte steps through the first 600 bytes
    // (the head, then values split byte by byte).
    for (uint64_t step : {uint64_t{1001}, uint64_t{65}, uint64_t{4099}, (uint64_t{1} << 20) + 3}) {
      SCOPED_TRACE("step " + std::to_string(step));
      std::vector<float> chunked = Start(), early;
      bool changed = true;
      ASSERT_TRUE(Send(*h, update, chunked, 0.37f, Cuts(update.size(), step, step == 65 ? 600 : 0),
                       &changed, false, &early)
                      .ok());
      EXPECT_FALSE(changed);
      // Folded as it arrived: the first 100k values (half the update) before the last byte
      // (the 1 MiB step cuts nothing of an update this small: all folded in Handle).
      if (step < update.size() / 2) {
        EXPECT_EQ(std::memcmp(early.data(), whole.data(), 100000 * sizeof(float)), 0);
      }
      ASSERT_EQ(std::memcmp(chunked.data(), whole.data(), whole.size() * sizeof(float)), 0);
    }
  }
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

// A NaN in the last value is met after every earlier part was folded: refused with the whole
// fold's message, and the reply marked (the partial sum is rebuilt by the coordinator). A NaN
// in the first value stops the first part before anything is folded: the partial sum as it
// was, the reply not marked.
TEST_F(FlLeafStream, ALateBadValueIsRefusedByNameAndMarksThePartialSum) {
  auto h = Leaf();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string late = Update(3, DType::kF32, nan, true);
  std::vector<float> acc = Start();
  bool changed = false;
  const Status st = Send(*h, late, acc, 0.5f, Cuts(late.size(), 100003), &changed);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "tensor 'fc2.bias': 1 non-finite values (first at index 9)");
  EXPECT_TRUE(changed);
  EXPECT_NE(acc, Start());

  std::string early = Update(4, DType::kF32);
  uint32_t hlen;
  std::memcpy(&hlen, early.data() + 4, 4);
  std::memcpy(early.data() + model::TensorAreaOffset(hlen), &nan, sizeof nan);
  acc = Start();
  changed = true;
  const Status first = Send(*h, early, acc, 0.5f, Cuts(early.size(), 100003), &changed);
  EXPECT_EQ(first.message(), "tensor 'fc1.weight': 1 non-finite values (first at index 0)");
  EXPECT_FALSE(changed);
  EXPECT_EQ(acc, Start());

  // A bad Q8 scale past the first block, found while the body arrives.
  std::string q8 = Update(5, DType::kQ8);
  std::memcpy(&hlen, q8.data() + 4, 4);
  const float neg = -1.0f;
  std::memcpy(q8.data() + model::TensorAreaOffset(hlen) + 700 * QuantBlockBytes(DType::kQ8, 64),
              &neg, sizeof neg);
  acc = Start();
  changed = false;
  const Status q = Send(*h, q8, acc, 0.5f, Cuts(q8.size(), 20011), &changed);
  EXPECT_EQ(q.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q.message().find("block scales invalid (first: block 700"), std::string::npos)
      << q.message();
  EXPECT_TRUE(changed);
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

// The client leaves mid-body: its request comes marked (kStatusClientGone); the leaf drops what
// it began, answers an error and marks the reply when it had folded part of it (the coordinator
// rebuilds the partial sum without it). The next update in the same buffer folds whole.
TEST_F(FlLeafStream, AClientThatLeavesMidBodyIsDroppedAndMarked) {
  auto h = Leaf();
  const std::string update = Update(11, DType::kBF16);
  std::vector<float> acc = Start();
  bool changed = false;
  const Status gone =
      Send(*h, update, acc, 0.5f, {update.size() / 3, update.size() / 2}, &changed, true);
  EXPECT_EQ(gone.message(), "the client left before its update arrived whole");
  EXPECT_TRUE(changed);
  // Left before anything landed past the head: nothing folded, nothing marked.
  acc = Start();
  changed = true;
  EXPECT_FALSE(Send(*h, update, acc, 0.5f, {100}, &changed, true).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(acc, Start());
  // The same buffer (the pool hands it out again) with another update: folded whole.
  std::vector<float> whole = Start(), again = Start();
  const std::string next = Update(12, DType::kBF16);
  ASSERT_TRUE(Send(*h, next, whole, 0.25f, {}).ok());
  ASSERT_TRUE(Send(*h, next, again, 0.25f, {next.size() / 2}).ok());
  EXPECT_EQ(std::memcmp(again.data(), whole.data(), whole.size() * sizeof(float)), 0);
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

}  // namespace
}  // namespace shoal
