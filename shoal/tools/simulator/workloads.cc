#include "shoal/tools/simulator/workloads.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <queue>
#include <utility>

#include "shoal/tools/simulator/distribution.h"

namespace shoal {
namespace {

double Exp(std::mt19937_64& rng, double rate) { return -std::log(1.0 - UniformUnit(rng)) / rate; }

class PoissonSource : public ArrivalSource {
 public:
  PoissonSource(uint32_t fn, double rate, double duration, uint64_t seed)
      : fn_(fn), rate_(rate), end_(duration), rng_(seed) {}
  bool Next(Arrival& out) override {
    if (rate_ <= 0) return false;
    t_ += Exp(rng_, rate_);
    if (t_ >= end_) return false;
    out = {t_, fn_, -1};
    return true;
  }

 private:
  uint32_t fn_;
  double rate_, end_, t_ = 0;
  std::mt19937_64 rng_;
};

class DiurnalSource : public ArrivalSource {
 public:
  DiurnalSource(uint32_t fn, double mean, double amp, double period, double duration, uint64_t seed,
                double phase)
      : fn_(fn),
        mean_(mean),
        amp_(std::clamp(amp, 0.0, 1.0)),
        period_(period),
        end_(duration),
        phase_(phase),
        rng_(seed) {}
  bool Next(Arrival& out) override {
    const double peak = mean_ * (1 + amp_);
    if (peak <= 0) return false;
    for (;;) {  // thinning (Lewis and Shedler)
      t_ += Exp(rng_, peak);
      if (t_ >= end_) return false;
      const double rate =
          mean_ * (1 + amp_ * std::sin(2 * std::numbers::pi * t_ / period_ + phase_));
      if (UniformUnit(rng_) * peak < rate) break;
    }
    out = {t_, fn_, -1};
    return true;
  }

 private:
  uint32_t fn_;
  double mean_, amp_, period_, end_, phase_, t_ = 0;
  std::mt19937_64 rng_;
};

class BurstySource : public ArrivalSource {
 public:
  BurstySource(uint32_t fn, double rate, double smin, double smax, double every, double duration,
               uint64_t seed)
      : fn_(fn),
        rate_(rate),
        lmin_(std::log(smin)),
        lmax_(std::log(smax)),
        every_(every),
        end_(duration),
        rng_(seed) {
    Shift();
  }
  bool Next(Arrival& out) override {
    if (rate_ <= 0) return false;
    t_ += SampleGamma(rng_, shape_, 1.0 / (rate_ * shape_));
    while (every_ > 0 && t_ >= next_shift_) Shift();
    if (t_ >= end_) return false;
    out = {t_, fn_, -1};
    return true;
  }

 private:
  void Shift() {
    shape_ = std::exp(lmin_ + (lmax_ - lmin_) * UniformUnit(rng_));
    next_shift_ += every_;
  }
  uint32_t fn_;
  double rate_, lmin_, lmax_, every_, end_, t_ = 0, shape_ = 1, next_shift_ = 0;
  std::mt19937_64 rng_;
};

class ZipfSource : public ArrivalSource {
 public:
  ZipfSource(uint32_t first, uint32_t n, double s, double rate, double duration, uint64_t seed)
      : first_(first), rate_(rate), end_(duration), rng_(seed) {
    cdf_.resize(n);
    double acc = 0;
    for (uint32_t k = 0; k < n; ++k) cdf_[k] = acc += 1.0 / std::pow(k + 1.0, s);
    for (auto& c : cdf_) c /= acc;
  }
  bool Next(Arrival& out) override {
    if (rate_ <= 0 || cdf_.empty()) return false;
    t_ += Exp(rng_, rate_);
    if (t_ >= end_) return false;
    const double u = UniformUnit(rng_);
    auto k = std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    if (k >= static_cast<long>(cdf_.size())) k = static_cast<long>(cdf_.size()) - 1;
    out = {t_, first_ + static_cast<uint32_t>(k), -1};
    return true;
  }

 private:
  uint32_t first_;
  double rate_, end_, t_ = 0;
  std::vector<double> cdf_;
  std::mt19937_64 rng_;
};

class TimerSource : public ArrivalSource {
 public:
  TimerSource(uint32_t fn, double period, double jitter, double duration, double phase,
              uint64_t seed)
      : fn_(fn), period_(period), jitter_(jitter), end_(duration), phase_(phase), rng_(seed) {}
  bool Next(Arrival& out) override {
    if (period_ <= 0) return false;
    const double t = phase_ + k_ * period_ + (jitter_ > 0 ? jitter_ * UniformUnit(rng_) : 0.0);
    if (t >= end_) return false;
    ++k_;
    out = {t, fn_, -1};
    return true;
  }

 private:
  uint32_t fn_;
  double period_, jitter_, end_, phase_;
  uint64_t k_ = 0;
  std::mt19937_64 rng_;
};

class VectorSource : public ArrivalSource {
 public:
  explicit VectorSource(std::vector<Arrival> a) : a_(std::move(a)) {
    if (!std::is_sorted(a_.begin(), a_.end(), [](auto& x, auto& y) { return x.t < y.t; })) {
      std::stable_sort(a_.begin(), a_.end(), [](auto& x, auto& y) { return x.t < y.t; });
    }
  }
  bool Next(Arrival& out) override {
    if (i_ >= a_.size()) return false;
    out = a_[i_++];
    return true;
  }

 private:
  std::vector<Arrival> a_;
  size_t i_ = 0;
};

class MergedSource : public ArrivalSource {
 public:
  explicit MergedSource(std::vector<std::unique_ptr<ArrivalSource>> s) : s_(std::move(s)) {
    for (size_t i = 0; i < s_.size(); ++i) Pull(i);
  }
  bool Next(Arrival& out) override {
    if (heap_.empty()) return false;
    std::pop_heap(heap_.begin(), heap_.end(), Later);
    const Item it = heap_.back();
    heap_.pop_back();
    out = it.a;
    Pull(it.src);
    return true;
  }

 private:
  struct Item {
    Arrival a;
    size_t src;
  };
  static bool Later(const Item& x, const Item& y) {
    return x.a.t != y.a.t ? x.a.t > y.a.t : x.src > y.src;
  }
  void Pull(size_t i) {
    Item it{{}, i};
    if (s_[i]->Next(it.a)) {
      heap_.push_back(it);
      std::push_heap(heap_.begin(), heap_.end(), Later);
    }
  }
  std::vector<std::unique_ptr<ArrivalSource>> s_;
  std::vector<Item> heap_;
};

class FlRoundsSource : public ArrivalSource {
 public:
  FlRoundsSource(uint32_t fn, uint32_t clients, double period, double spread, uint32_t rounds,
                 uint64_t seed)
      : fn_(fn), clients_(clients), period_(period), spread_(spread), rounds_(rounds), rng_(seed) {}
  bool Next(Arrival& out) override {
    while (i_ >= batch_.size()) {
      if (round_ >= rounds_ || clients_ == 0) return false;
      batch_.resize(clients_);
      for (auto& t : batch_) t = round_ * period_ + spread_ * UniformUnit(rng_);
      std::sort(batch_.begin(), batch_.end());
      i_ = 0;
      ++round_;
    }
    out = {batch_[i_++], fn_, -1};
    return true;
  }

 private:
  uint32_t fn_, clients_;
  double period_, spread_;
  uint32_t rounds_, round_ = 0;
  std::vector<double> batch_;
  size_t i_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace

std::unique_ptr<ArrivalSource> MakePoisson(uint32_t function, double rate_per_s, double duration_s,
                                           uint64_t seed) {
  return std::make_unique<PoissonSource>(function, rate_per_s, duration_s, seed);
}
std::unique_ptr<ArrivalSource> MakeDiurnal(uint32_t function, double mean_rate_per_s,
                                           double amplitude, double period_s, double duration_s,
                                           uint64_t seed, double phase) {
  return std::make_unique<DiurnalSource>(function, mean_rate_per_s, amplitude, period_s, duration_s,
                                         seed, phase);
}
std::unique_ptr<ArrivalSource> MakeBursty(uint32_t function, double mean_rate_per_s,
                                          double shape_min, double shape_max, double shift_every_s,
                                          double duration_s, uint64_t seed) {
  return std::make_unique<BurstySource>(function, mean_rate_per_s, shape_min, shape_max,
                                        shift_every_s, duration_s, seed);
}
std::unique_ptr<ArrivalSource> MakeZipf(uint32_t first_function, uint32_t n, double exponent,
                                        double total_rate_per_s, double duration_s, uint64_t seed) {
  return std::make_unique<ZipfSource>(first_function, n, exponent, total_rate_per_s, duration_s,
                                      seed);
}
std::unique_ptr<ArrivalSource> MakeTimer(uint32_t function, double period_s, double jitter_s,
                                         double duration_s, double phase_s, uint64_t seed) {
  return std::make_unique<TimerSource>(function, period_s, jitter_s, duration_s, phase_s, seed);
}
std::unique_ptr<ArrivalSource> MakeFlRounds(uint32_t function, uint32_t clients,
                                            double round_period_s, double spread_s, uint32_t rounds,
                                            uint64_t seed) {
  return std::make_unique<FlRoundsSource>(function, clients, round_period_s, spread_s, rounds,
                                          seed);
}
std::unique_ptr<ArrivalSource> Merge(std::vector<std::unique_ptr<ArrivalSource>> sources) {
  return std::make_unique<MergedSource>(std::move(sources));
}
std::unique_ptr<ArrivalSource> FromVector(std::vector<Arrival> arrivals) {
  return std::make_unique<VectorSource>(std::move(arrivals));
}
std::vector<Arrival> Collect(ArrivalSource& source) {
  std::vector<Arrival> out;
  Arrival a;
  while (source.Next(a)) out.push_back(a);
  return out;
}

}  // namespace shoal
