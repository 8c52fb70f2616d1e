#include "shoal/fl/kernels/fold_pool.h"

#include <algorithm>

#include "shoal/fl/kernels/fold_u32.h"

namespace shoal::aggregator {

void FoldPool::set_chunk_elements(size_t n) {
  chunk_ = std::max<size_t>(16, (n + 15) & ~size_t{15});
}

void FoldPool::set_finite_block_bytes(size_t bytes) {
  finite_block_bytes_ = std::max<size_t>(64, (bytes + 63) & ~size_t{63});
}

FoldPool::FoldFiniteResult FoldPool::FoldFinite(float* acc, const void* x, DType dtype, size_t n,
                                                float w) {
  // A quantized type's block is counted in values (a multiple of its quantization block).
  const size_t block =
      IsQuantizedDType(dtype) ? finite_block_bytes_ : finite_block_bytes_ / DTypeSize(dtype);
  const size_t first = std::min(n, block);
  if (aggregator::FoldFinite(acc, x, dtype, first, w, block) < first) return {false, false};
  if (first == n) return {true, n > 0};
  const bool finite = Run({.op = Op::kFoldFinite,
                           .dtype = dtype,
                           .f32 = acc + first,
                           .wire = static_cast<const char*>(x) + ElementOffset(dtype, first),
                           .n = n - first,
                           .scalar = w,
                           .block = block});
  return {finite, true};
}

void FoldPool::Fold(float* acc, const void* x, DType dtype, size_t n, float w) {
  Run({.op = Op::kFold, .dtype = dtype, .f32 = acc, .wire = x, .n = n, .scalar = w});
}

void FoldPool::FoldU32(uint32_t* acc, const void* x, size_t n) {
  Run({.op = Op::kFoldU32, .dtype = DType::kF32, .wire = x, .n = n, .u32 = acc});
}

void FoldPool::Sum(float* acc, std::span<const float* const> xs, std::span<const float> ws,
                   size_t n) {
  Run({.op = Op::kSum, .f32 = acc, .n = n, .xs = xs, .ws = ws});
}

void FoldPool::Scale(float* acc, size_t n, float a) {
  Run({.op = Op::kScale, .f32 = acc, .n = n, .scalar = a});
}

bool FoldPool::AllFinite(const void* x, DType dtype, size_t n) {
  return Run({.op = Op::kAllFinite, .dtype = dtype, .wire = x, .n = n});
}

void FoldPool::ConvertToF32(float* out, const void* x, DType dtype, size_t n) {
  Run({.op = Op::kToF32, .dtype = dtype, .f32 = out, .wire = x, .n = n});
}

void FoldPool::ConvertFromF32(void* out, const float* x, DType dtype, size_t n) {
  // f32 is only read for kFromF32.
  Run({.op = Op::kFromF32, .dtype = dtype, .f32 = const_cast<float*>(x), .wire_out = out, .n = n});
}

void FoldPool::RunRange(const Job& job, size_t begin, size_t end) {
  const size_t n = end - begin;
  // begin is a multiple of the chunk, which for a quantized type starts a block (TakeChunks).
  const uint64_t wire_at = ElementOffset(job.dtype, begin);
  // (Scale and Sum have no wire x: no offset from a null pointer.)
  const char* wire = job.wire == nullptr ? nullptr : static_cast<const char*>(job.wire) + wire_at;
  switch (job.op) {
    case Op::kFold:
      aggregator::Fold(job.f32 + begin, wire, job.dtype, n, job.scalar);
      break;
    case Op::kSum:
      std::fill(job.f32 + begin, job.f32 + end, 0.0f);
      for (size_t k = 0; k < job.xs.size(); ++k) {
        aggregator::Fold(job.f32 + begin, job.xs[k] + begin, DType::kF32, n, job.ws[k]);
      }
      break;
    case Op::kFoldU32:
      aggregator::FoldU32(job.u32 + begin, wire, n);
      break;
    case Op::kScale:
      aggregator::Scale(job.f32 + begin, n, job.scalar);
      break;
    case Op::kAllFinite:
      if (!aggregator::AllFinite(wire, job.dtype, n)) {
        all_finite_.store(false, std::memory_order_relaxed);
      }
      break;
    case Op::kFoldFinite:
      if (aggregator::FoldFinite(job.f32 + begin, wire, job.dtype, n, job.scalar, job.block) < n) {
        all_finite_.store(false, std::memory_order_relaxed);
      }
      break;
    case Op::kToF32:
      aggregator::ConvertToF32(job.f32 + begin, wire, job.dtype, n);
      break;
    case Op::kFromF32:
      aggregator::ConvertFromF32(static_cast<char*>(job.wire_out) + wire_at, job.f32 + begin,
                                 job.dtype, n);
      break;
  }
}

void FoldPool::TakeChunks(const Job& job) {
  // A quantized type's chunks start blocks: rounded up to a multiple of kQuantBlock.
  const size_t chunk =
      IsQuantizedDType(job.dtype) ? (chunk_ + kQuantBlock - 1) / kQuantBlock * kQuantBlock : chunk_;
  for (;;) {
    // A NaN anywhere settles AllFinite and FoldFinite: stop taking chunks.
    if ((job.op == Op::kAllFinite || job.op == Op::kFoldFinite) &&
        !all_finite_.load(std::memory_order_relaxed)) {
      return;
    }
    const size_t begin = next_chunk_.fetch_add(1, std::memory_order_relaxed) * chunk;
    if (begin >= job.n) return;
    RunRange(job, begin, std::min(job.n, begin + chunk));
  }
}

bool FoldPool::Run(const Job& job) {
  if (job.n < min_parallel_ || team_.threads() == 1) {
    if (job.op == Op::kAllFinite) return aggregator::AllFinite(job.wire, job.dtype, job.n);
    if (job.op == Op::kFoldFinite) {
      return aggregator::FoldFinite(job.f32, job.wire, job.dtype, job.n, job.scalar, job.block) ==
             job.n;
    }
    RunRange(job, 0, job.n);
    return true;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  next_chunk_.store(0, std::memory_order_relaxed);
  all_finite_.store(true, std::memory_order_relaxed);
  auto take_chunks = [this, &job](unsigned /*thread*/) { TakeChunks(job); };
  team_.Run(take_chunks);
  return all_finite_.load(std::memory_order_relaxed);
}

}  // namespace shoal::aggregator
