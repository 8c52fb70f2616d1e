// Detector: one Baseline per function (behaviour_model.h explains the model), fed every scoring
// interval with each instance's Interval and Events. While a function learns, its intervals go
// into its baseline; once learned, each instance's interval is scored. A rate anomaly is
// reported once per episode (an instance anomalous in cpu for three intervals running is one
// anomaly; it is reported again after a clean interval); an event rule once per distinct event
// and instance. Not thread-safe: the monitor calls it from shoald's loop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "shoal/security/detect/behaviour_model.h"

namespace shoal::detect {

class Detector {
 public:
  explicit Detector(ModelOptions defaults) : defaults_(std::move(defaults)) {}

  // The function's extra allowed paths (its manifest's security.allowedPaths), before its
  // first interval; the defaults' are kept.
  void SetAllowedPaths(const std::string& function, const std::vector<std::string>& extra);
  // A saved profile: the function is scored from its first interval.
  Status LoadProfile(const std::string& function, const std::string& text);

  // One instance's interval at tick `tick`: the anomalies to act on (none while learning).
  std::vector<Anomaly> Observe(const std::string& function, uint32_t instance, uint64_t tick,
                               const Interval& iv, const std::vector<Event>& events);
  // The functions whose learning finished with this tick's intervals (to save their profile).
  std::vector<std::string> FinishedLearning();

  void ForgetInstance(uint32_t instance) { latched_.erase(instance); }
  void ForgetFunction(const std::string& function) { functions_.erase(function); }

  bool Learned(const std::string& function) const;
  // "learning (3 of 12 intervals)", "scoring (baseline of 12 intervals, 24 samples)",
  // "scoring (saved profile)", or "" for a function not seen yet.
  std::string State(const std::string& function) const;
  // The learned profile (Baseline::Serialize), "" while learning.
  std::string Profile(const std::string& function) const;
  const Baseline* BaselineOf(const std::string& function) const;

 private:
  struct FunctionModel {
    std::unique_ptr<Baseline> baseline;
    bool from_profile = false;
    bool reported_finished = false;
    std::vector<std::string> allowed;
  };
  FunctionModel& ModelOf(const std::string& function);

  ModelOptions defaults_;
  std::map<std::string, FunctionModel> functions_;
  // Per instance: rate kinds anomalous in its last interval, and events already reported.
  struct Latch {
    std::set<std::string> kinds;
    std::set<std::string> events;
  };
  std::map<uint32_t, Latch> latched_;
};

}  // namespace shoal::detect
