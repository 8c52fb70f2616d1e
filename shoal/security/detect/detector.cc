#include "shoal/security/detect/detector.h"

namespace shoal::detect {

Detector::FunctionModel& Detector::ModelOf(const std::string& function) {
  auto it = functions_.find(function);
  if (it != functions_.end()) return it->second;
  FunctionModel& m = functions_[function];
  m.allowed = defaults_.allowed_paths;
  ModelOptions o = defaults_;
  o.allowed_paths = m.allowed;
  m.baseline = std::make_unique<Baseline>(o);
  return m;
}

void Detector::SetAllowedPaths(const std::string& function, const std::vector<std::string>& extra) {
  FunctionModel& m = ModelOf(function);
  std::vector<std::string> allowed = defaults_.allowed_paths;
  allowed.insert(allowed.end(), extra.begin(), extra.end());
  if (allowed == m.allowed) return;
  m.allowed = allowed;
  if (m.baseline->learned()) {
    // Re-made with the new list from its own profile (the learned part is unchanged).
    ModelOptions o = defaults_;
    o.allowed_paths = allowed;
    auto b = Baseline::Parse(m.baseline->Serialize(), o);
    if (b.ok()) m.baseline = std::make_unique<Baseline>(std::move(*b));
  } else if (m.baseline->samples() == 0) {
    ModelOptions o = defaults_;
    o.allowed_paths = allowed;
    m.baseline = std::make_unique<Baseline>(o);
  }
}

Status Detector::LoadProfile(const std::string& function, const std::string& text) {
  FunctionModel& m = ModelOf(function);
  ModelOptions o = defaults_;
  o.allowed_paths = m.allowed;
  auto b = Baseline::Parse(text, o);
  if (!b.ok()) return b.status();
  m.baseline = std::make_unique<Baseline>(std::move(*b));
  m.from_profile = true;
  m.reported_finished = true;
  return Status::Ok();
}

std::vector<Anomaly> Detector::Observe(const std::string& function, uint32_t instance,
                                       uint64_t tick, const Interval& iv,
                                       const std::vector<Event>& events) {
  FunctionModel& m = ModelOf(function);
  if (!m.baseline->Advance(tick)) {
    m.baseline->Learn(tick, iv, events);
    return {};
  }
  Latch& latch = latched_[instance];
  std::vector<Anomaly> out;
  std::set<std::string> rate_kinds;
  for (auto& a : m.baseline->Score(iv, events)) {
    if (a.score > 0) {  // a rate: once per episode
      if (rate_kinds.insert(a.kind).second && !latch.kinds.count(a.kind))
        out.push_back(std::move(a));
    } else if (latch.events.insert(a.kind + " " + a.evidence).second) {
      out.push_back(std::move(a));
    }
  }
  latch.kinds = std::move(rate_kinds);
  return out;
}

std::vector<std::string> Detector::FinishedLearning() {
  std::vector<std::string> out;
  for (auto& [name, m] : functions_) {
    if (m.baseline->learned() && !m.reported_finished) {
      m.reported_finished = true;
      out.push_back(name);
    }
  }
  return out;
}

bool Detector::Learned(const std::string& function) const {
  auto it = functions_.find(function);
  return it != functions_.end() && it->second.baseline->learned();
}

std::string Detector::State(const std::string& function) const {
  auto it = functions_.find(function);
  if (it == functions_.end()) return "";
  const Baseline& b = *it->second.baseline;
  if (it->second.from_profile) return "scoring (saved profile)";
  if (!b.learned()) {
    return "learning (" + std::to_string(b.ticks_learned()) + " of " +
           std::to_string(defaults_.learn_intervals) + " intervals)";
  }
  return "scoring (baseline of " + std::to_string(b.ticks_learned()) + " intervals, " +
         std::to_string(b.samples()) + " samples)";
}

std::string Detector::Profile(const std::string& function) const {
  auto it = functions_.find(function);
  if (it == functions_.end() || !it->second.baseline->learned()) return "";
  return it->second.baseline->Serialize();
}

const Baseline* Detector::BaselineOf(const std::string& function) const {
  auto it = functions_.find(function);
  return it == functions_.end() ? nullptr : it->second.baseline.get();
}

}  // namespace shoal::detect
