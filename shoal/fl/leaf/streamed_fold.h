// One model update folded while its body arrives (issue 34): the gateway announces each part of
// the tensor area as it lands in the pool, and the leaf folds the whole values (whole 64-value
// blocks for Q8/Q4) that are there, so that once the last byte lands only the last part is left
// to fold before the 202. The arithmetic is the whole-update fold's: every value goes through the
// same kernel once, parts start at multiples of 16 values (FoldPool's own chunk rule), so the
// partial sum is bit for bit the one a fold of the whole update gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal {

class StreamedFold {
 public:
  // `view`: the update's structure (ParseUpdate, values not scanned) over its whole declared
  // body, which starts at `body`; `acc`: the partial sum (the model's f32 layout), `w` the
  // update's weight.
  StreamedFold(const model::UpdateView& view, const model::ModelSpec& spec, const std::byte* body,
               float* acc, float w);

  // Folds what lies in body[0, arrived) and was not folded yet, value by value in 16-value
  // steps (the last values of a tensor once it is whole). False once a non-finite value (or an
  // invalid Q8/Q4 scale) was met: that part and everything after it is never folded.
  // `threads` null: on the calling thread alone (while the body arrives, the other cores
  // receive it); the fold's threads for what is left once it is whole.
  bool Advance(uint64_t arrived, aggregator::FoldPool* threads);

  const std::byte* body() const { return body_; }
  float* acc() const { return acc_; }
  bool failed() const { return failed_; }
  // Something of the update is in the partial sum (a refusal then needs the sum rebuilt).
  bool folded_any() const { return folded_; }
  // Every value of every tensor folded.
  bool done() const;

 private:
  // One tensor: where its bytes start in the body, and how many of its values are folded.
  struct Part {
    float* acc = nullptr;
    const std::byte* x = nullptr;
    uint64_t begin = 0;  // byte offset in the body
    uint64_t length = 0;
    DType dtype = DType::kF32;
    uint64_t numel = 0;
    uint64_t folded = 0;
  };
  // Values of `p` whose bytes all lie below `arrived`, in 16-value steps unless all are there.
  static uint64_t Available(const Part& p, uint64_t arrived);

  const std::byte* body_;
  float* acc_;
  float w_;
  std::vector<Part> parts_;  // in body order
  size_t next_ = 0;          // parts_[< next_] are done
  bool folded_ = false;
  bool failed_ = false;
};

}  // namespace shoal
