// The GPU fold equals the CPU fold (fold.h) on the same random updates: device batches with
// unaligned heads and tails, the leaf's host path through registered memory with many chunks
// (every staging slot reused), and the device-resident accumulator fed from host and device.
#include "shoal/fl/gpu/gpu_fold.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shoal/fl/kernels/fold.h"
#include "tests/support/gpu_test_skip.h"

namespace shoal::aggregator {
namespace {

// Skips only where no device is visible; with one (or SHOAL_REQUIRE_GPU=1) any error fails.
#define SKIP_WITHOUT_GPU()                              \
  do {                                                  \
    std::string why_;                                   \
    if (!GpuFoldAvailable(&why_)) SHOAL_GPU_SKIP(why_); \
  } while (0)

// n random elements of dtype, stored as bytes (values in [-2, 2], exactly representable).
std::vector<std::byte> RandomUpdate(DType dtype, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> f(n);
  for (float& v : f) v = dist(rng);
  std::vector<std::byte> out(n * DTypeSize(dtype));
  ConvertFromF32(out.data(), f.data(), dtype, n);
  return out;
}

// Device FMA and CPU FMA paths agree bit for bit; the scalar CPU path rounds twice per step.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = 1e-5f * (1.0f + std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (++bad <= 5) {
        EXPECT_NEAR(got[i], want[i], tol) << what << " at " << i;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
};

const DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST(GpuFold, DeviceBatchesMatchCpuWithUnalignedHeadsAndTails) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kDTypes) {
    const size_t es = DTypeSize(dtype);
    // acc offset 1 float and x offset 4 / es elements: both 4 bytes past 16-byte alignment
    // for f32 (vector path with a head); for 2-byte types x is 2 elements off (scalar head).
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{123457}}) {
      for (size_t acc_off : {size_t{0}, size_t{1}, size_t{3}}) {
        const int count = 5;
        std::vector<float> acc(n);
        for (size_t i = 0; i < n; ++i) acc[i] = static_cast<float>(i % 17) * 0.25f;
        std::vector<std::vector<std::byte>> xs;
        std::vector<float> ws;
        for (int k = 0; k < count; ++k) {
          xs.push_back(RandomUpdate(dtype, n, 100 + k));
          ws.push_back(0.1f + 0.3f * k);
        }
        std::vector<float> want = acc;
        for (int k = 0; k < count; ++k) Fold(want.data(), xs[k].data(), dtype, n, ws[k]);

        DeviceBuffer dacc((n + 8) * sizeof(float));
        ASSERT_NE(dacc.p, nullptr);
        float* a = static_cast<float*>(dacc.p) + acc_off;
        ASSERT_EQ(cudaMemcpy(a, acc.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
        std::vector<DeviceBuffer*> dx;
        std::vector<const void*> xp;
        for (int k = 0; k < count; ++k) {
          dx.push_back(new DeviceBuffer((n + 16) * es));
          // Update k starts k elements in: some line up with acc, some do not.
          auto* p = static_cast<std::byte*>(dx.back()->p) + static_cast<size_t>(k) * es;
          ASSERT_EQ(cudaMemcpy(p, xs[k].data(), n * es, cudaMemcpyHostToDevice), cudaSuccess);
          xp.push_back(p);
        }
        // One update at a time (each may take the vector path) and then all in one batch.
        std::vector<float> got(n), got_batch(n);
        for (int k = 0; k < count; ++k) {
          Status st = GpuFoldDevice(a, &xp[k], &ws[k], 1, dtype, n, nullptr);
          ASSERT_TRUE(st.ok()) << st.ToString();
        }
        ASSERT_EQ(cudaMemcpy(got.data(), a, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(a, acc.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
        Status st = GpuFoldDevice(a, xp.data(), ws.data(), count, dtype, n, nullptr);
        ASSERT_TRUE(st.ok()) << st.ToString();
        ASSERT_EQ(cudaMemcpy(got_batch.data(), a, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (DeviceBuffer* b : dx) delete b;
        const std::string what = std::string(DTypeName(dtype)) + " n=" + std::to_string(n) +
                                 " acc_off=" + std::to_string(acc_off);
        ExpectClose(got, want, what + " one by one");
        ExpectClose(got_batch, want, what + " batched");
      }
    }
  }
}

TEST(GpuFold, RejectsMisalignedElementsAndOversizedBatches) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer d(1024);
  ASSERT_NE(d.p, nullptr);
  const float w = 1;
  const void* odd = static_cast<std::byte*>(d.p) + 1;
  EXPECT_EQ(GpuFoldDevice(static_cast<float*>(d.p), &odd, &w, 1, DType::kF16, 8, nullptr).code(),
            StatusCode::kInvalidArgument);
  std::vector<const void*> many(kGpuFoldMaxBatch + 1, d.p);
  std::vector<float> ws(many.size(), 1.0f);
  EXPECT_EQ(GpuFoldDevice(static_cast<float*>(d.p), many.data(), ws.data(),
                          static_cast<int>(many.size()), DType::kF32, 8, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(GpuFold, HostPathThroughRegisteredMemoryMatchesCpu) {
  SKIP_WITHOUT_GPU();
  GpuFolderOptions opt;
  opt.chunk_bytes = 4096;  // 1024 floats: a 100k-element update is ~100 chunks over 3 slots
  auto folder = GpuFolder::Create(opt);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  // One "pool": the partial sum and the updates live in the same registered mapping, as in the
  // leaf (the updates at offsets that are not 16-byte aligned, to exercise the copies).
  const size_t n = 100'003;
  std::vector<std::byte> pool(n * 4 + 3 * (n * 4 + 64) + 4096);
  ASSERT_TRUE((*folder)->RegisterHost(pool.data(), pool.size()).ok());
  float* acc = reinterpret_cast<float*>(pool.data());
  for (size_t i = 0; i < n; ++i) acc[i] = 1.0f - static_cast<float>(i % 5);
  std::vector<float> want(acc, acc + n);
  size_t off = n * 4 + 2;
  for (DType dtype : kDTypes) {
    auto x = RandomUpdate(dtype, n, 7 + static_cast<uint32_t>(dtype));
    std::byte* px = pool.data() + off;
    std::memcpy(px, x.data(), x.size());
    off += x.size() + 30;
    const float w = 0.375f;
    Fold(want.data(), px, dtype, n, w);
    // Two segments, as an update's tensors are: [0, n/3) and [n/3, n).
    const size_t cut = n / 3;
    GpuFoldSegment segs[2] = {{acc, px, dtype, cut, w},
                              {acc + cut, px + cut * DTypeSize(dtype), dtype, n - cut, w}};
    Status st = (*folder)->FoldHost(segs);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  ExpectClose(std::vector<float>(acc, acc + n), want, "host path");
}

// FoldHost pipelines chunks across streams, so its segments must be disjoint: overlapping
// accumulators (one sum folded twice in one call) and an update inside an accumulator are
// refused before anything is copied; segments that only touch fold as the CPU does.
TEST(GpuFold, HostPathRefusesOverlappingSegmentsAndFoldsTouchingOnes) {
  SKIP_WITHOUT_GPU();
  GpuFolderOptions opt;
  opt.chunk_bytes = 4096;  // 1024 floats: every segment spans several chunks and slots
  auto folder = GpuFolder::Create(opt);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  const size_t n = 10'000;
  std::vector<float> acc(2 * n, 1.0f);
  const std::vector<std::byte> x = RandomUpdate(DType::kF32, 2 * n, 11);
  const std::byte* px = x.data();
  const GpuFoldSegment twice[2] = {{acc.data(), px, DType::kF32, n, 0.5f},
                                   {acc.data() + n / 2, px, DType::kF32, n, 0.5f}};
  Status st = (*folder)->FoldHost(twice);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("the accumulator of segment 0 and the accumulator of segment 1"),
            std::string::npos)
      << st.message();
  const GpuFoldSegment aliased[2] = {{acc.data(), px, DType::kF32, n, 0.5f},
                                     {acc.data() + n, acc.data() + 10, DType::kF32, n, 0.5f}};
  EXPECT_EQ((*folder)->FoldHost(aliased).code(), StatusCode::kInvalidArgument);
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], 1.0f) << "written at " << i;

  std::vector<float> want = acc;
  Fold(want.data(), px, DType::kF32, 2 * n, 0.5f);
  const GpuFoldSegment touching[2] = {{acc.data(), px, DType::kF32, n, 0.5f},
                                      {acc.data() + n, px + n * 4, DType::kF32, n, 0.5f}};
  st = (*folder)->FoldHost(touching);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectClose(acc, want, "touching segments");
}

TEST(GpuFold, DeviceAccumulatorFromHostAndDeviceMatchesCpu) {
  SKIP_WITHOUT_GPU();
  GpuFolderOptions opt;
  opt.chunk_bytes = 64 << 10;
  auto folder = GpuFolder::Create(opt);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  const size_t n = 300'001;
  for (DType dtype : kDTypes) {
    const size_t es = DTypeSize(dtype);
    const int count = kGpuFoldMaxBatch + 3;  // two device batches
    std::vector<float> want(n, 0.0f);
    ASSERT_TRUE((*folder)->ResetAccumulator(n).ok());
    std::vector<std::vector<std::byte>> host;
    std::vector<DeviceBuffer*> dev;
    std::vector<const void*> dptr;
    std::vector<float> ws;
    for (int k = 0; k < count; ++k) {
      host.push_back(RandomUpdate(dtype, n, 1000 + k));
      ws.push_back(1.0f / (k + 1));
      dev.push_back(new DeviceBuffer(n * es));
      ASSERT_EQ(cudaMemcpy(dev.back()->p, host.back().data(), n * es, cudaMemcpyHostToDevice),
                cudaSuccess);
      dptr.push_back(dev.back()->p);
    }
    // Host updates first (pageable memory: correct, just not overlapped), then device ones.
    for (int k = 0; k < 4; ++k) {
      ASSERT_TRUE((*folder)->AccumulateHost(host[k].data(), dtype, ws[k]).ok());
      Fold(want.data(), host[k].data(), dtype, n, ws[k]);
    }
    ASSERT_TRUE((*folder)->AccumulateDevice(dptr.data() + 4, ws.data() + 4, count - 4, dtype).ok());
    for (int k = 4; k < count; ++k) Fold(want.data(), host[k].data(), dtype, n, ws[k]);
    std::vector<float> got(n);
    Status st = (*folder)->DownloadAccumulator(got.data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (DeviceBuffer* b : dev) delete b;
    ExpectClose(got, want, "accumulator " + std::string(DTypeName(dtype)));
  }
}

}  // namespace
}  // namespace shoal::aggregator
