#include "shoal/fl/leaf/streamed_fold.h"

#include <algorithm>

namespace shoal {

namespace {
// FoldPool cuts its work at multiples of 16 values (no two threads on one 64-byte line of acc):
// a part boundary there keeps each value in the kernel lane a whole-update fold gives it.
constexpr uint64_t kStep = 16;
}  // namespace

StreamedFold::StreamedFold(const model::UpdateView& view, const model::ModelSpec& spec,
                           const std::byte* body, float* acc, float w)
    : body_(body), acc_(acc), w_(w) {
  parts_.reserve(view.tensors.size());
  for (const model::TensorView& t : view.tensors) {
    Part p;
    p.acc = acc + spec.offset(t.index);
    p.x = t.data;
    p.begin = static_cast<uint64_t>(t.data - body);
    p.length = t.length;
    p.dtype = t.dtype;
    p.numel = t.numel;
    parts_.push_back(p);
  }
  // The body arrives in order: so are the parts folded.
  std::sort(parts_.begin(), parts_.end(),
            [](const Part& a, const Part& b) { return a.begin < b.begin; });
}

uint64_t StreamedFold::Available(const Part& p, uint64_t arrived) {
  if (arrived <= p.begin) return 0;
  const uint64_t bytes = arrived - p.begin;
  if (bytes >= p.length) return p.numel;
  uint64_t n;
  if (IsQuantizedDType(p.dtype)) {
    n = bytes / QuantBlockBytes(p.dtype, kQuantBlock) * kQuantBlock;  // whole blocks
  } else {
    n = bytes / DTypeSize(p.dtype);
  }
  return n / kStep * kStep;  // a block of 64 values is a multiple of 16 already
}

bool StreamedFold::Advance(uint64_t arrived, aggregator::FoldPool* threads) {
  while (!failed_ && next_ < parts_.size()) {
    Part& p = parts_[next_];
    const uint64_t n = Available(p, arrived);
    if (n > p.folded) {
      float* acc = p.acc + p.folded;
      const std::byte* x = p.x + ElementOffset(p.dtype, p.folded);
      const uint64_t count = n - p.folded;
      bool finite;
      if (threads != nullptr) {
        const auto r = threads->FoldFinite(acc, x, p.dtype, count, w_);
        folded_ = folded_ || r.folded;
        finite = r.finite;
      } else {
        // FoldPool's block (4 KiB of the update), in values; the quantized types stop at a bad
        // block's scale whatever it is.
        const size_t width = IsQuantizedDType(p.dtype) ? 1 : DTypeSize(p.dtype);
        const size_t block = aggregator::FoldPool::kDefaultFiniteBlockBytes / width;
        const size_t done = aggregator::FoldFinite(acc, x, p.dtype, count, w_, block);
        folded_ = folded_ || done > 0;
        finite = done == count;
      }
      if (!finite) {
        failed_ = true;
        break;
      }
      p.folded = n;
    }
    if (p.folded < p.numel) break;  // the rest of this tensor has not arrived
    ++next_;
  }
  return !failed_;
}

bool StreamedFold::done() const { return !failed_ && next_ == parts_.size(); }

}  // namespace shoal
