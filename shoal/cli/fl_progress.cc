#include "shoal/cli/fl_progress.h"

#include <algorithm>
#include <cmath>

#include "shoal/cli/progress.h"
#include "shoal/cli/table.h"

namespace shoal::cli {
namespace {

using nlohmann::json;

// Commits per minute are counted over this much of the job's latest time.
constexpr double kRateWindowS = 60;
// The accuracy's gain per second is taken over this many of the newest evaluated versions.
constexpr size_t kAccuracyTrendPoints = 5;

template <typename T>
std::optional<T> Opt(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<T>();
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

std::string Fixed4(std::optional<double> v) { return v ? FormatFixed(*v, 4) : "-"; }

std::string VersionText(const FlJobProgress& p) {
  std::string v = "version ";
  v += std::to_string(p.version);
  if (p.target_rounds > 0) v.append("/").append(std::to_string(p.target_rounds));
  return v;
}

std::string TargetText(const FlJobProgress& p) {
  std::string t;
  if (p.target_accuracy > 0) t = "accuracy " + FormatFixed(p.target_accuracy, 4);
  if (p.target_rounds > 0) {
    t += (t.empty() ? "" : " or ") + std::to_string(p.target_rounds) + " rounds";
  }
  return t;
}

std::string AccuracyText(const FlJobProgress& p) {
  std::string a = "accuracy " + Fixed4(p.accuracy);
  if (p.evaluated_version) a += " (v" + std::to_string(*p.evaluated_version) + ")";
  return a + "  loss " + Fixed4(p.loss);
}

std::string RateText(const FlJobProgress& p) {
  return FormatFixed(p.commits_per_min, 1) + " commits/min  ETA " + FormatEta(p.eta_s);
}

}  // namespace

FlJobProgress JobProgress(const json& status) {
  FlJobProgress p;
  p.name = Str(status, "name");
  p.algorithm = Str(status, "algorithm");
  p.state = Str(status, "state");
  p.version = Opt<uint64_t>(status, "version").value_or(0);
  p.target_rounds = Opt<uint64_t>(status, "target_rounds").value_or(0);
  p.target_accuracy = Opt<double>(status, "target_accuracy").value_or(0);
  p.elapsed_s = Opt<double>(status, "elapsed_s").value_or(0);
  if (status.contains("clients") && status["clients"].is_object()) {
    p.clients_joined = Opt<uint64_t>(status["clients"], "joined").value_or(0);
    p.clients_expected = Opt<uint64_t>(status["clients"], "expected").value_or(0);
  }

  struct Point {
    uint64_t version;
    double t, accuracy;
  };
  std::vector<Point> evaluated;
  std::vector<double> commit_times;
  const json versions = status.value("versions", json::array());
  for (const json& v : versions.is_array() ? versions : json::array()) {
    const uint64_t version = Opt<uint64_t>(v, "version").value_or(0);
    const double t = Opt<double>(v, "elapsed_s").value_or(0);
    if (version > 0) commit_times.push_back(t);
    if (auto acc = Opt<double>(v, "accuracy")) {
      evaluated.push_back({version, t, *acc});
      p.best_accuracy = std::max(p.best_accuracy.value_or(0), *acc);
      if (!p.evaluated_version || version > *p.evaluated_version) {
        p.evaluated_version = version;
        p.accuracy = acc;
        p.loss = Opt<double>(v, "loss");
      }
    }
  }
  // The server's best outlives versions it no longer lists.
  if (auto best = Opt<double>(status, "best_accuracy"); best && *best > 0) {
    p.best_accuracy = std::max(p.best_accuracy.value_or(0), *best);
  }

  const double window = std::min(kRateWindowS, p.elapsed_s);
  if (window >= 1) {
    const auto recent = std::count_if(commit_times.begin(), commit_times.end(),
                                      [&](double t) { return t > p.elapsed_s - window; });
    p.commits_per_min = static_cast<double>(recent) / window * 60;
  }

  std::optional<double> by_accuracy, by_rounds;
  std::optional<double> eta_accuracy, eta_rounds;
  if (p.target_accuracy > 0) {
    const double best = p.best_accuracy.value_or(0);
    by_accuracy = std::clamp(best / p.target_accuracy, 0.0, 1.0);
    std::sort(evaluated.begin(), evaluated.end(),
              [](const Point& a, const Point& b) { return a.version < b.version; });
    if (evaluated.size() > kAccuracyTrendPoints) {
      evaluated.erase(evaluated.begin(), evaluated.end() - kAccuracyTrendPoints);
    }
    if (best >= p.target_accuracy) {
      eta_accuracy = 0;
    } else if (evaluated.size() >= 2 && evaluated.back().t > evaluated.front().t) {
      const double gain = (evaluated.back().accuracy - evaluated.front().accuracy) /
                          (evaluated.back().t - evaluated.front().t);
      if (gain > 0) {
        const double since = p.elapsed_s - evaluated.back().t;
        eta_accuracy = std::max(0.0, (p.target_accuracy - best) / gain - since);
      }
    }
  }
  if (p.target_rounds > 0) {
    by_rounds = std::clamp(static_cast<double>(p.version) / p.target_rounds, 0.0, 1.0);
    const double left = p.version >= p.target_rounds ? 0 : p.target_rounds - p.version;
    if (left == 0) {
      eta_rounds = 0;
    } else if (p.commits_per_min > 0) {
      eta_rounds = left / (p.commits_per_min / 60);
    }
  }
  if (by_accuracy || by_rounds)
    p.fraction = std::max(by_accuracy.value_or(0), by_rounds.value_or(0));
  if (eta_accuracy && eta_rounds) {
    p.eta_s = std::min(*eta_accuracy, *eta_rounds);
  } else {
    p.eta_s = eta_accuracy ? eta_accuracy : eta_rounds;
  }
  if (p.done()) {
    p.fraction = 1.0;
    p.eta_s = 0;
  }
  return p;
}

std::vector<std::string> ProgressBlock(const FlJobProgress& p, int width) {
  std::vector<std::string> lines;
  lines.push_back("fljob/" + p.name + "  " + p.algorithm + "  " + p.state + "  " + VersionText(p) +
                  "  clients " + std::to_string(p.clients_joined) + "/" +
                  std::to_string(p.clients_expected));
  if (p.fraction) {
    const std::string tail = "  " + FormatPercent(*p.fraction) + "  to " + TargetText(p);
    const int bar = std::clamp(width - 1 - static_cast<int>(tail.size()), 10, 60);
    lines.push_back(RenderBar(*p.fraction, bar) + tail);
  } else {
    lines.push_back("no stop condition: the job runs until it is deleted");
  }
  lines.push_back(AccuracyText(p) + "  " + RateText(p) + "  elapsed " + FormatEta(p.elapsed_s));
  return lines;
}

std::string ProgressLine(const FlJobProgress& p) {
  std::string line = "fljob/" + p.name + "  " + p.state + "  " + VersionText(p);
  if (p.fraction) line += "  " + FormatPercent(*p.fraction) + " to " + TargetText(p);
  return line + "  " + AccuracyText(p) + "  " + RateText(p);
}

json ProgressJson(const FlJobProgress& p) {
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  return json{{"job", p.name},
              {"state", p.state},
              {"version", p.version},
              {"target_rounds", p.target_rounds > 0 ? json(p.target_rounds) : json(nullptr)},
              {"target_accuracy", p.target_accuracy > 0 ? json(p.target_accuracy) : json(nullptr)},
              {"progress", opt(p.fraction)},
              {"accuracy", opt(p.accuracy)},
              {"loss", opt(p.loss)},
              {"evaluated_version", opt(p.evaluated_version)},
              {"best_accuracy", opt(p.best_accuracy)},
              {"commits_per_min", p.commits_per_min},
              {"eta_s", opt(p.eta_s)},
              {"elapsed_s", p.elapsed_s}};
}

std::string DoneLine(const FlJobProgress& p) {
  return "fljob/" + p.name + " done: version " + std::to_string(p.version) + ", best accuracy " +
         Fixed4(p.best_accuracy) + " (target " +
         (p.target_accuracy > 0 ? FormatFixed(p.target_accuracy, 4) : "none") + "), " +
         FormatFixed(p.elapsed_s, 1) + "s";
}

}  // namespace shoal::cli
