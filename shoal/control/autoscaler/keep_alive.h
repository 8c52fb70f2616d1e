// Keep-alive policies: how long an idle instance stays, and when to pre-warm one ahead of the
// next invocation. `fixed` is the 1-minute baseline; `histogram` is Shahrad et al. 2020
// ("Serverless in the Wild"): a per-function histogram of idle times between invocations gives
// a pre-warm window (head percentile) and a keep-alive window (tail percentile).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/control/autoscaler/policy_params.h"

namespace shoal {

// After an invocation: unload (if prewarm_after_s > 0), load again prewarm_after_s later and
// keep that instance keep_alive_s; with prewarm_after_s == 0, simply keep it keep_alive_s.
struct KeepAliveDecision {
  double prewarm_after_s = 0;
  double keep_alive_s = 0;
};

class KeepAlivePolicy {
 public:
  virtual ~KeepAlivePolicy() = default;
  virtual void OnInvocation(double now_s) = 0;
  virtual KeepAliveDecision Decide() const = 0;
  virtual const char* name() const = 0;
};

class FixedKeepAlive final : public KeepAlivePolicy {
 public:
  explicit FixedKeepAlive(const FixedKeepAliveParams& p) : p_(p) {}
  void OnInvocation(double) override {}
  KeepAliveDecision Decide() const override { return {0, p_.keep_alive_s}; }
  const char* name() const override { return "fixed"; }

 private:
  FixedKeepAliveParams p_;
};

class HistogramKeepAlive final : public KeepAlivePolicy {
 public:
  // Why Decide() chose what it did (for logs, metrics and tests).
  enum class Mode { kFallback, kHistogram, kOutOfBounds };

  explicit HistogramKeepAlive(const HistogramKeepAliveParams& p);  // p must have passed Validate

  void OnInvocation(double now_s) override;
  // `count` invocations at now_s (a control interval's arrivals): the first closes the idle
  // time since the previous invocation, the others add idle times of 0.
  void OnInvocations(double now_s, uint64_t count);
  // Records one idle time directly.
  void AddIdleTime(double idle_s);
  KeepAliveDecision Decide() const override;
  const char* name() const override { return "histogram"; }

  Mode mode() const;
  uint64_t samples() const { return in_bounds_ + out_of_bounds_; }
  double max_idle_s() const { return max_in_bounds_; }
  // Coefficient of variation of the bin counts (0 when empty).
  double BinCountCv() const;
  const std::vector<uint64_t>& bins() const { return bins_; }
  std::optional<double> last_invocation_s() const { return last_; }

 private:
  size_t PercentileBin(double percentile) const;

  HistogramKeepAliveParams p_;
  std::vector<uint64_t> bins_;
  uint64_t in_bounds_ = 0;
  uint64_t out_of_bounds_ = 0;
  std::deque<double> recent_oob_;
  std::optional<double> last_;
  double max_in_bounds_ = 0;  // longest in-range idle time seen
  double bin_sum_sq_ = 0;     // sum of squared bin counts (the CV without a pass over the bins)
};

// "fixed" or "histogram".
Result<std::unique_ptr<KeepAlivePolicy>> MakeKeepAlivePolicy(const std::string& name,
                                                             const KeepAliveParams& params);

}  // namespace shoal
