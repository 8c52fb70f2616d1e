// CheckFoldSegments: the precondition of folders that pipeline segments (GpuFolder::FoldHost).
// Disjoint accumulators pass, touching ranges pass, and every kind of overlap is named.
#include "shoal/fl/kernels/fold_segments.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shoal::aggregator {
namespace {

class FoldSegmentsTest : public ::testing::Test {
 protected:
  std::vector<float> acc_ = std::vector<float>(1000, 0.0f);
  std::vector<uint16_t> x_ = std::vector<uint16_t>(1000, 0x3f80);  // bf16 1.0
  float* A(size_t i) { return acc_.data() + i; }
  const void* X(size_t i) { return x_.data() + i; }
};

TEST_F(FoldSegmentsTest, DisjointAndTouchingSegmentsPass) {
  // A model's tensors: back to back in the partial sum and in the update.
  const FoldSegment segs[3] = {{A(0), X(0), DType::kBF16, 100, 1},
                               {A(100), X(100), DType::kBF16, 250, 1},
                               {A(350), X(350), DType::kBF16, 650, 1}};
  EXPECT_TRUE(CheckFoldSegments(segs).ok());
  // Out of order, and two segments reading the same update bytes (only read): still fine.
  const FoldSegment shuffled[3] = {segs[2], segs[0], {A(100), X(0), DType::kBF16, 250, 1}};
  EXPECT_TRUE(CheckFoldSegments(shuffled).ok());
  // Empty segments overlap nothing.
  const FoldSegment empty[2] = {{A(0), X(0), DType::kBF16, 10, 1},
                                {A(5), X(5), DType::kBF16, 0, 1}};
  EXPECT_TRUE(CheckFoldSegments(empty).ok());
  EXPECT_TRUE(CheckFoldSegments({}).ok());
}

TEST_F(FoldSegmentsTest, OverlappingAccumulatorsAreRefusedByName) {
  const FoldSegment segs[3] = {{A(0), X(0), DType::kBF16, 100, 1},
                               {A(500), X(500), DType::kBF16, 10, 1},
                               {A(99), X(99), DType::kBF16, 10, 1}};  // shares acc[99]
  const Status st = CheckFoldSegments(segs);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("fold segments overlap: the accumulator of segment 0 and the "
                               "accumulator of segment 2 share bytes",
                               0),
            0u)
      << st.message();
  // The same accumulator twice (two updates into one sum in one call) is an overlap too.
  const FoldSegment twice[2] = {{A(0), X(0), DType::kBF16, 100, 1},
                                {A(0), X(100), DType::kBF16, 100, 1}};
  EXPECT_EQ(CheckFoldSegments(twice).code(), StatusCode::kInvalidArgument);
}

// CheckFoldSegments refuses `segs` with a message that names the overlap `named`.
void ExpectRefusedNaming(std::span<const FoldSegment> segs, const std::string& named) {
  const Status st = CheckFoldSegments(segs);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(named), std::string::npos) << st.message();
}

TEST_F(FoldSegmentsTest, AnUpdateInsideAnAccumulatorIsRefused) {
  // Segment 1 reads bytes that segment 0 writes (an update aliasing the partial sum).
  const FoldSegment segs[2] = {{A(0), X(0), DType::kBF16, 100, 1},
                               {A(200), A(50), DType::kF32, 10, 1}};
  ASSERT_NO_FATAL_FAILURE(
      ExpectRefusedNaming(segs, "the accumulator of segment 0 and the update of segment 1"));
  // An update range that starts before an accumulator and runs into it.
  const FoldSegment into[2] = {{A(10), X(0), DType::kBF16, 100, 1},
                               {A(500), A(5), DType::kF32, 10, 1}};
  ExpectRefusedNaming(into, "the update of segment 1 and the accumulator of segment 0");
}

TEST_F(FoldSegmentsTest, FoldSegmentsAddsEverySegment) {
  const FoldSegment segs[2] = {{A(0), X(0), DType::kBF16, 3, 2.0f},
                               {A(1), X(0), DType::kBF16, 3, 0.5f}};  // overlapping: CPU is fine
  FoldSegments(segs);
  EXPECT_EQ(acc_[0], 2.0f);
  EXPECT_EQ(acc_[1], 2.5f);
  EXPECT_EQ(acc_[2], 2.5f);
  EXPECT_EQ(acc_[3], 0.5f);
  EXPECT_EQ(acc_[4], 0.0f);
}

}  // namespace
}  // namespace shoal::aggregator
