// The FL leaf (fl_leaf_handler.h) with the device folder given by the test: a stand-in that
// fails on purpose (runs everywhere) and the real GPU folder (where a device is visible). What
// a device error does: that update answered 502, the device dropped, the CPU fold from then on.
// Its own executable: the leaf is linked in here, and a process that also dlopened the fl-leaf
// module would register the update format's protobuf descriptors twice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pool_requests.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/leaf/fl_leaf_handler.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "tests/support/gpu_test_skip.h"

namespace shoal {
namespace {

// Requests in a real pool, as an instance receives them.
class LeafPool : public PoolRequestsTest {
 protected:
  void SetUp() override { MakePool("shoal-leaf-test-", 16 << 20); }
};

// A stand-in for the GPU folder: folds as the CPU does, except on fold number `fail_on`, where it
// writes into the partial sum and then fails, as a device error halfway through would.
struct FakeFolderLog {
  int attaches = 0, folds = 0, fail_on = -1;
  bool destroyed = false;
};
class FakeDeviceFolder final : public LeafDeviceFolder {
 public:
  explicit FakeDeviceFolder(std::shared_ptr<FakeFolderLog> log) : log_(std::move(log)) {}
  ~FakeDeviceFolder() override { log_->destroyed = true; }
  std::string Describe() const override { return "fake device"; }
  Status Attach(void*, size_t) override {
    ++log_->attaches;
    return {};
  }
  Status Fold(std::span<const aggregator::FoldSegment> segments) override {
    if (++log_->folds == log_->fail_on) {
      segments[0].acc[0] += 12345.0f;
      return Internal("fake device: an illegal memory access was encountered");
    }
    aggregator::FoldSegments(segments);
    return {};
  }

 private:
  std::shared_ptr<FakeFolderLog> log_;
};

class FlLeafDevice : public LeafPool {
 protected:
  // An update of MLP 4-3-2 whose values are k/8 + seed (exact in f32).
  std::string Update(float seed) {
    model::Model m(spec_);
    for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = float(i % 8) / 8.0f + seed;
    model::UpdateMeta meta;
    meta.job = "j";
    meta.client_id = "c0";
    meta.num_samples = 10;
    auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
    EXPECT_TRUE(body.ok());
    return std::string(reinterpret_cast<const char*>(body->data()), body->size());
  }
  // Folds `update` with weight w into partial_ through `h`; the status it answered, and in
  // `*aux_changed` whether its reply says the partial sum changed (ResponseBuilder).
  Status Fold(Handler& h, const std::string& update, float w, bool* aux_changed = nullptr) {
    const uint64_t req = MakeRequest(update, "application/octet-stream");
    Request r = View(req);
    r.aux = std::as_writable_bytes(std::span<float>(partial_));
    r.aux_value = w;
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
  // What the CPU fold makes of partial_ with `update` at weight w.
  std::vector<float> CpuFold(std::vector<float> acc, float seed, float w) {
    model::Model m(spec_);
    for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = float(i % 8) / 8.0f + seed;
    aggregator::Fold(acc.data(), m.values.data(), aggregator::DType::kF32, acc.size(), w);
    return acc;
  }

  model::ModelSpec spec_ = model::MlpSpec(4, {3}, 2);
  std::vector<float> partial_ = std::vector<float>(spec_.num_params(), 0.0f);
};

// A robust job's leaf (fold = false, SHOAL_FL_FOLD=none) validates and answers 202 with no
// partial sum given and writes nothing; a non-finite update is still refused by name, and the
// device is never asked to fold.
TEST_F(FlLeafDevice, ValidateOnlyLeafAnswersWithoutAPartialSum) {
  auto log = std::make_shared<FakeFolderLog>();
  FlLeafOptions o;
  o.fold = false;
  o.device = LeafFoldDevice::kGpu;
  o.attach_in_background = false;
  auto h = CreateFlLeafHandler(spec_, o, std::make_unique<FakeDeviceFolder>(log));
  auto answer = [&](const std::string& update) {
    const uint64_t req = MakeRequest(update, "application/octet-stream");
    Request r = View(req);  // no aux: the coordinator names no partial sum
    ResponseBuilder rb(*pool_, 1, req);
    Status st = h->Handle(r, rb);
    if (st.ok()) {
      EXPECT_EQ(rb.status(), 202);
      auto fin = rb.Finish();
      EXPECT_TRUE(fin.ok());
      if (fin.ok()) {
        const std::string body(
            reinterpret_cast<const char*>(ReadPayload(pool_->Data(fin->first)).body.data()),
            ReadPayload(pool_->Data(fin->first)).body.size());
        EXPECT_EQ(body, "{\"accepted\":true,\"client_id\":\"c0\",\"base_version\":0}\n");
        (void)pool_->Release(fin->first, 1);
      }
    } else {
      (void)pool_->Release(req, 1);
    }
    return st;
  };
  EXPECT_TRUE(answer(Update(0.5f)).ok());
  std::string bad = Update(0.5f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.data() + bad.size() - sizeof(float), &nan, sizeof nan);
  const Status st = answer(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "tensor 'fc2.bias': 1 non-finite values (first at index 1)");
  EXPECT_EQ(log->folds, 0);
}

// A device fold that fails does not end the leaf: that update is answered 502 (kUnavailable:
// the coordinator rebuilds the partial sum, the client sends it again), the device is dropped,
// and every later update folds on the CPU, into the same partial sum, as the CPU fold does.
TEST_F(FlLeafDevice, DeviceErrorAnswers502AndFoldsOnTheCpuFromThenOn) {
  auto log = std::make_shared<FakeFolderLog>();
  log->fail_on = 2;
  FlLeafOptions o;
  o.device = LeafFoldDevice::kGpu;
  o.attach_in_background = false;
  auto h = CreateFlLeafHandler(spec_, o, std::make_unique<FakeDeviceFolder>(log));
  h->OnPoolAttached(pool_->base(), pool_->mapped_size());
  EXPECT_EQ(log->attaches, 1);

  ASSERT_TRUE(Fold(*h, Update(1), 0.5f).ok());
  EXPECT_EQ(log->folds, 1);
  EXPECT_EQ(partial_, CpuFold(std::vector<float>(partial_.size(), 0.0f), 1, 0.5f));

  const Status failed = Fold(*h, Update(2), 0.25f);
  EXPECT_EQ(log->folds, 2);
  ASSERT_EQ(failed.code(), StatusCode::kUnavailable) << failed.ToString();
  EXPECT_EQ(HttpStatusFor(failed.code()), 502);
  EXPECT_EQ(failed.message(),
            "the fake device fold failed (fake device: an illegal memory access was "
            "encountered); the leaf folds on the CPU now: send the update again");
  EXPECT_TRUE(log->destroyed) << "the failed device is released";

  // The partial sum holds part of the failed update (the coordinator rebuilds it); what the
  // leaf adds from now on is the CPU fold's, and the device is not asked again.
  const std::vector<float> before = partial_;
  ASSERT_TRUE(Fold(*h, Update(3), 0.125f).ok());
  EXPECT_EQ(log->folds, 2);
  EXPECT_EQ(partial_, CpuFold(before, 3, 0.125f));
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

// A refused update counts nowhere. The CPU leaf checks and folds an update in one pass, block
// by block (FoldPool::FoldFinite), on an update large enough for the fold's threads (407k
// values, 13 chunks of 32k): a NaN, then an Inf, in the first block is refused before anything
// is folded (the partial sum byte for byte as it was, the reply not marked); in the very last
// value it is refused with the same message after the earlier blocks went in, and the reply
// says the partial sum changed (the coordinator rebuilds it: the integration test
// ARefusedUpdateFoldedInPartIsRebuiltAtCommit). Either way the client's answer is today's.
TEST_F(FlLeafDevice, ARefusedUpdateLeavesThePartialSumOrMarksItForRebuild) {
  spec_ = model::MlpSpec(784, {512}, 10);
  partial_.assign(spec_.num_params(), 0.0f);
  FlLeafOptions o;
  o.device = LeafFoldDevice::kCpu;
  auto h = CreateFlLeafHandler(spec_, o, nullptr);
  bool changed = true;
  ASSERT_TRUE(Fold(*h, Update(1), 0.5f, &changed).ok());
  EXPECT_FALSE(changed);
  const std::vector<float> before = partial_;
  const std::string good = Update(2);
  auto view = model::ParseUpdate(std::as_bytes(std::span<const char>(good)), spec_);
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view->tensors[0].index, 0u);  // fc1.weight
  const size_t values = reinterpret_cast<const char*>(view->tensors[0].data) - good.data();
  for (const float bad_value :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (const size_t index : {size_t{0}, size_t{100}}) {
      std::string bad = good;
      std::memcpy(bad.data() + values + index * sizeof(float), &bad_value, sizeof bad_value);
      const Status st = Fold(*h, bad, 0.25f, &changed);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
      EXPECT_EQ(st.message(), "tensor 'fc1.weight': 1 non-finite values (first at index " +
                                  std::to_string(index) + ")");
      EXPECT_FALSE(changed) << "nothing was folded";
      ASSERT_EQ(std::memcmp(partial_.data(), before.data(), before.size() * sizeof(float)), 0)
          << "a refused update changed the partial sum";
    }
    std::string bad = good;
    std::memcpy(bad.data() + bad.size() - sizeof(float), &bad_value, sizeof bad_value);
    const Status st = Fold(*h, bad, 0.25f, &changed);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_EQ(st.message(), "tensor 'fc2.bias': 1 non-finite values (first at index 9)");
    EXPECT_TRUE(changed) << "blocks before the NaN were folded: the reply must say so";
    // What went in is the fold's: the first block of fc1.weight is, fc2.bias (the NaN's block)
    // is not.
    const std::vector<float> full = CpuFold(before, 2, 0.25f);
    const size_t block = aggregator::FoldPool::kDefaultFiniteBlockBytes / sizeof(float);
    EXPECT_EQ(std::memcmp(partial_.data(), full.data(), block * sizeof(float)), 0);
    const size_t bias = spec_.num_params() - 10;
    EXPECT_EQ(std::memcmp(partial_.data() + bias, before.data() + bias, 10 * sizeof(float)), 0);
    partial_ = before;  // as the coordinator's rebuild leaves it
  }
  ASSERT_TRUE(Fold(*h, Update(3), 0.125f, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(partial_, CpuFold(before, 3, 0.125f));
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

// device auto: updates below device_min_update_bytes fold on the CPU, larger ones on the
// device; device cpu never attaches the device at all.
TEST_F(FlLeafDevice, AutoSendsOnlyLargeUpdatesToTheDeviceAndCpuNone) {
  auto log = std::make_shared<FakeFolderLog>();
  FlLeafOptions o;
  o.attach_in_background = false;
  o.device_min_update_bytes = spec_.num_params() * 4 + 1;  // the f32 update is one byte short
  auto h = CreateFlLeafHandler(spec_, o, std::make_unique<FakeDeviceFolder>(log));
  h->OnPoolAttached(pool_->base(), pool_->mapped_size());
  ASSERT_TRUE(Fold(*h, Update(1), 1.0f).ok());
  EXPECT_EQ(log->folds, 0);
  o.device_min_update_bytes = spec_.num_params() * 4;
  auto big = CreateFlLeafHandler(spec_, o, std::make_unique<FakeDeviceFolder>(log));
  big->OnPoolAttached(pool_->base(), pool_->mapped_size());
  ASSERT_TRUE(Fold(*big, Update(1), 1.0f).ok());
  EXPECT_EQ(log->folds, 1);
  EXPECT_EQ(partial_, CpuFold(CpuFold(std::vector<float>(partial_.size(), 0.0f), 1, 1), 1, 1));

  auto cpu_log = std::make_shared<FakeFolderLog>();
  o.device = LeafFoldDevice::kCpu;
  auto cpu = CreateFlLeafHandler(spec_, o, std::make_unique<FakeDeviceFolder>(cpu_log));
  cpu->OnPoolAttached(pool_->base(), pool_->mapped_size());
  ASSERT_TRUE(Fold(*cpu, Update(1), 1.0f).ok());
  EXPECT_EQ(cpu_log->attaches, 0);
  EXPECT_EQ(cpu_log->folds, 0);
}

#if defined(SHOAL_TEST_GPU_FOLD)
// The real GPU folder behind the leaf, with the second fold sent as two overlapping segments,
// which GpuFolder::FoldHost refuses (a real error from the real folder, without breaking the
// device for the tests that follow).
class OverlapOnSecondFold final : public LeafDeviceFolder {
 public:
  explicit OverlapOnSecondFold(std::unique_ptr<LeafDeviceFolder> real) : real_(std::move(real)) {}
  std::string Describe() const override { return real_->Describe(); }
  Status Attach(void* base, size_t bytes) override { return real_->Attach(base, bytes); }
  Status Fold(std::span<const aggregator::FoldSegment> segments) override {
    if (++folds == 2) {
      const aggregator::FoldSegment twice[2] = {segments[0], segments[0]};
      return real_->Fold(twice);
    }
    return real_->Fold(segments);
  }
  static inline int folds = 0;

 private:
  std::unique_ptr<LeafDeviceFolder> real_;
};

// Where a device exists: the leaf's GPU path (the pool pinned, the update read from it) folds
// as the CPU does, and an error from the GPU folder falls back to the CPU as the fake's does.
TEST_F(FlLeafDevice, GpuFolderFoldsAsTheCpuAndItsErrorFallsBack) {
  auto gpu = CreateGpuLeafFolder();
  if (!gpu.ok()) SHOAL_GPU_SKIP(gpu.status().ToString());
  FlLeafOptions o;
  o.device = LeafFoldDevice::kGpu;
  o.attach_in_background = false;
  auto h = CreateFlLeafHandler(spec_, o, std::make_unique<OverlapOnSecondFold>(std::move(*gpu)));
  h->OnPoolAttached(pool_->base(), pool_->mapped_size());
  ASSERT_TRUE(Fold(*h, Update(1), 0.5f).ok());
  EXPECT_EQ(OverlapOnSecondFold::folds, 1) << "folded on the GPU";
  // Values k/8 + 1 times 0.5: every product and sum is exact, on the device as on the CPU.
  EXPECT_EQ(partial_, CpuFold(std::vector<float>(partial_.size(), 0.0f), 1, 0.5f));
  const Status failed = Fold(*h, Update(2), 0.25f);
  ASSERT_EQ(failed.code(), StatusCode::kUnavailable) << failed.ToString();
  EXPECT_NE(failed.message().find("fold segments overlap"), std::string::npos) << failed.message();
  const std::vector<float> before = partial_;  // untouched: FoldHost checks before copying
  EXPECT_EQ(before, CpuFold(std::vector<float>(partial_.size(), 0.0f), 1, 0.5f));
  ASSERT_TRUE(Fold(*h, Update(3), 0.125f).ok());
  EXPECT_EQ(OverlapOnSecondFold::folds, 2);
  EXPECT_EQ(partial_, CpuFold(before, 3, 0.125f));
}
#endif

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// spec.aggregation.wireFormats: int8/int4 updates folded without being expanded (the partial sum
// equals dequantizing then folding, bit for bit), refused by name where the job does not take
// them; a bad block scale refused naming the tensor, block and scale, with the reply saying
// whether the partial sum must be rebuilt; a truncated body refused before anything is folded.
TEST_F(FlLeafDevice, QuantizedUpdatesFoldAsDequantizedAndBadOnesAreRefusedByName) {
  spec_ = model::MlpSpec(784, {64}, 10);
  partial_.assign(spec_.num_params(), 0.0f);
  auto encode = [&](float seed, DType d) {
    model::Model m(spec_);
    for (size_t i = 0; i < m.values.size(); ++i) {
      m.values[i] = std::sin(static_cast<float>(i) * 0.01f + seed) * 0.1f;
    }
    model::UpdateMeta meta;
    meta.job = "j";
    meta.client_id = "c0";
    meta.num_samples = 10;
    auto body = model::EncodeUpdate(meta, m, d);
    EXPECT_TRUE(body.ok());
    return std::string(reinterpret_cast<const char*>(body->data()), body->size());
  };
  // The partial sum the two-step path gives: each tensor dequantized, then folded as f32.
  auto two_step = [&](std::vector<float> acc, const std::string& body, float w) {
    auto view = model::ParseUpdate(std::as_bytes(std::span<const char>(body)), spec_);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    for (const model::TensorView& t : view->tensors) {
      std::vector<float> x(t.numel);
      aggregator::ConvertToF32(x.data(), t.data, t.dtype, t.numel);
      aggregator::Fold(acc.data() + spec_.offset(t.index), x.data(), DType::kF32, t.numel, w);
    }
    return acc;
  };
  FlLeafOptions plain;
  plain.device = LeafFoldDevice::kCpu;
  auto f32_job = CreateFlLeafHandler(spec_, plain, nullptr);
  const Status refused = Fold(*f32_job, encode(1, DType::kQ8), 0.5f);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "tensor 'fc1.weight': dtype Q8 not allowed (spec.aggregation.wireFormats: f32, bf16, "
            "f16)");

  FlLeafOptions o = plain;
  o.wire_formats = {DType::kQ8, DType::kQ4};
  auto h = CreateFlLeafHandler(spec_, o, nullptr);
  EXPECT_EQ(
      Fold(*h, encode(1, DType::kF32), 0.5f).message(),
      "tensor 'fc1.weight': dtype F32 not allowed (spec.aggregation.wireFormats: int8, int4)");
  for (DType d : {DType::kQ8, DType::kQ4}) {
    const std::string good = encode(2, d);
    EXPECT_LT(good.size(), spec_.num_params() * (d == DType::kQ8 ? 1.07 : 0.57));
    const std::vector<float> want = two_step(partial_, good, 0.25f);
    bool changed = true;
    ASSERT_TRUE(Fold(*h, good, 0.25f, &changed).ok());
    EXPECT_FALSE(changed);
    ASSERT_EQ(std::memcmp(partial_.data(), want.data(), want.size() * 4), 0) << DTypeName(d);

    auto view = model::ParseUpdate(std::as_bytes(std::span<const char>(good)), spec_);
    ASSERT_TRUE(view.ok());
    const size_t fc1 = reinterpret_cast<const char*>(view->tensors[0].data) - good.data();
    const size_t blocks = (view->tensors[0].numel + 63) / 64;
    const float bad_scales[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(), -0.5f, 1e37f};
    const char* shown[] = {"nan", "inf", "-0.5", "1e+37"};
    const std::vector<float> before = partial_;
    for (size_t k = 0; k < std::size(bad_scales); ++k) {
      for (const size_t block : {size_t{0}, size_t{700}}) {
        std::string bad = good;
        std::memcpy(bad.data() + fc1 + ElementOffset(d, block * 64), &bad_scales[k], 4);
        const Status st = Fold(*h, bad, 0.25f, &changed);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(st.message(), "tensor 'fc1.weight': 1 of " + std::to_string(blocks) + " " +
                                    std::string(DTypeName(d)) +
                                    " block scales invalid (first: block " + std::to_string(block) +
                                    ", scale " + shown[k] +
                                    "); a scale is finite, >= +0 and <= FLT_MAX/128");
        // Block 0 is checked before anything is folded; block 700 after some were: the reply
        // says the partial sum changed, and the coordinator rebuilds it from what it accepted.
        EXPECT_EQ(changed, block != 0);
        if (block == 0) {
          EXPECT_EQ(std::memcmp(partial_.data(), before.data(), before.size() * 4), 0);
        }
        partial_ = before;  // as the coordinator's rebuild leaves it
      }
    }
    std::string truncated = good.substr(0, good.size() - 1);
    const Status st = Fold(*h, truncated, 0.25f, &changed);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("tensor 'fc2.bias'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("body truncated"), std::string::npos) << st.message();
    EXPECT_FALSE(changed);
    EXPECT_EQ(partial_, before);
  }
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

}  // namespace
}  // namespace shoal
