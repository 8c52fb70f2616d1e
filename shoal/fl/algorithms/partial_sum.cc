#include "shoal/fl/algorithms/partial_sum.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"

namespace shoal::aggregator {

void FoldInto(float* acc, const float* x, size_t n, float w) { Fold(acc, x, DType::kF32, n, w); }

namespace {

// by_base[base] += c, in first-seen order (few bases: a short vector).
void AddBaseWeight(std::vector<std::pair<uint64_t, double>>& by_base, uint64_t base, double c) {
  auto it =
      std::find_if(by_base.begin(), by_base.end(), [&](const auto& e) { return e.first == base; });
  if (it == by_base.end()) {
    by_base.emplace_back(base, c);
  } else {
    it->second += c;
  }
}

}  // namespace

Status PartialSum::Fold(std::span<const float> update, double c, uint64_t base_version) {
  if (!std::isfinite(c)) return InvalidArgument("update coefficient is not finite");
  if (count_ == 0 && sum_.size() != update.size()) {
    sum_.assign(update.size(), 0.0f);
  } else if (update.size() != sum_.size()) {
    return InvalidArgument("update has " + std::to_string(update.size()) +
                           " parameters, the partial sum " + std::to_string(sum_.size()));
  }
  FoldInto(sum_.data(), update.data(), update.size(), static_cast<float>(c));
  weight_ += c;
  ++count_;
  AddBaseWeight(by_base_, base_version, c);
  return Status::Ok();
}

Status PartialSum::Merge(const PartialSum& other) {
  if (other.count_ == 0) return Status::Ok();
  if (count_ == 0 && sum_.size() != other.sum_.size()) {
    sum_.assign(other.sum_.size(), 0.0f);
  } else if (sum_.size() != other.sum_.size()) {
    return InvalidArgument("cannot merge partial sums of " + std::to_string(other.sum_.size()) +
                           " and " + std::to_string(sum_.size()) + " parameters");
  }
  FoldInto(sum_.data(), other.sum_.data(), sum_.size(), 1.0f);
  weight_ += other.weight_;
  count_ += other.count_;
  for (const auto& [base, w] : other.by_base_) AddBaseWeight(by_base_, base, w);
  return Status::Ok();
}

Status PartialSum::MergeFolded(std::span<const float> sum,
                               std::span<const std::pair<uint64_t, double>> folded, double scale,
                               FoldPool* threads) {
  if (!std::isfinite(scale)) return InvalidArgument("merge scale is not finite");
  if (folded.empty()) return Status::Ok();
  if (count_ == 0 && sum_.size() != sum.size()) {
    sum_.assign(sum.size(), 0.0f);
  } else if (sum_.size() != sum.size()) {
    return InvalidArgument("cannot merge a leaf sum of " + std::to_string(sum.size()) +
                           " parameters into one of " + std::to_string(sum_.size()));
  }
  if (threads != nullptr) {
    threads->Fold(sum_.data(), sum.data(), DType::kF32, sum_.size(), static_cast<float>(scale));
  } else {
    FoldInto(sum_.data(), sum.data(), sum_.size(), static_cast<float>(scale));
  }
  for (const auto& [base, folded_c] : folded) {
    const double c = folded_c * scale;
    weight_ += c;
    ++count_;
    AddBaseWeight(by_base_, base, c);
  }
  return Status::Ok();
}

Status PartialSum::ResetToFolded(std::span<const FoldedSum> sums, FoldPool* threads) {
  by_base_.clear();
  weight_ = 0.0;
  count_ = 0;
  Status refused = Status::Ok();
  std::vector<const float*> xs;
  std::vector<float> ws;
  size_t n = sum_.size();
  for (const FoldedSum& s : sums) {
    Status st = Status::Ok();
    if (!std::isfinite(s.scale)) {
      st = InvalidArgument("merge scale is not finite");
    } else if (s.folded.empty()) {
      continue;
    } else if (xs.empty()) {
      n = s.sum.size();  // the first merged sizes an empty sum, as MergeFolded's does
    } else if (s.sum.size() != n) {
      st = InvalidArgument("cannot merge a leaf sum of " + std::to_string(s.sum.size()) +
                           " parameters into one of " + std::to_string(n));
    }
    if (!st.ok()) {
      if (refused.ok()) refused = st;
      continue;
    }
    xs.push_back(s.sum.data());
    ws.push_back(static_cast<float>(s.scale));
    for (const auto& [base, folded_c] : s.folded) {
      const double c = folded_c * s.scale;
      weight_ += c;
      ++count_;
      AddBaseWeight(by_base_, base, c);
    }
  }
  if (sum_.size() != n) sum_.resize(n);
  if (threads != nullptr) {
    threads->Sum(sum_.data(), xs, ws, n);
  } else {
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    for (size_t k = 0; k < xs.size(); ++k) FoldInto(sum_.data(), xs[k], n, ws[k]);
  }
  return refused;
}

void PartialSum::Reset() {
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  by_base_.clear();
  weight_ = 0.0;
  count_ = 0;
}

}  // namespace shoal::aggregator
