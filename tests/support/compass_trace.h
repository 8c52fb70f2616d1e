// A FedCompass arrival trace recorded from APPFL's own scheduler (bench/fl_appfl_replay.py) and
// its replay through Shoal's FedCompassScheduler: the same arrivals and T_l timer firings, at the
// same times, each answered in the trace's words, so the two can be compared line by line (the
// ctest FedCompassTrace.* and bench-fl-appfl's fidelity table). Links shoal_fl_algorithms.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/fl/algorithms/compass_scheduler.h"

namespace shoal::testing {

struct CompassTraceEvent {
  bool timer = false;  // "T <t> ...": a T_l timer fired; else "A <client> <t> ..."
  aggregator::ClientId client = 0;
  double t = 0;
  std::string t_text;  // the time as written (Python's repr: reads back exactly)
  std::string line;    // the recorded line, as APPFL answered
};

struct CompassTrace {
  aggregator::FedCompassParams params;
  std::vector<CompassTraceEvent> events;
  int dropped = 0;  // '# dropped' lines: late updates APPFL's merged buffer did not aggregate
};

// Parses the text bench/fl_appfl_replay.py writes; on a malformed line, *error names it.
inline CompassTrace ParseCompassTrace(const std::string& text, std::string* error) {
  CompassTrace tr;
  std::istringstream in(text);
  std::string line;
  bool have_params = false;
  while (std::getline(in, line)) {
    if (line.starts_with("# params ")) {
      unsigned clients = 0, q_min = 0, q_max = 0;
      double lambda = 0, momentum = 0;
      if (std::sscanf(line.c_str(), "# params clients=%u q_min=%u q_max=%u lambda=%lf momentum=%lf",
                      &clients, &q_min, &q_max, &lambda, &momentum) != 5) {
        *error = std::string("bad params line: ") + line;
        return tr;
      }
      tr.params.num_clients = clients;
      tr.params.q_min = q_min;
      tr.params.q_max = q_max;
      tr.params.latest_time_factor = lambda;
      tr.params.speed_momentum = momentum;
      have_params = true;
      continue;
    }
    if (line.starts_with("# dropped")) ++tr.dropped;
    if (line.empty() || line[0] == '#') continue;
    CompassTraceEvent e;
    e.line = line;
    std::istringstream f(line);
    std::string kind, t;
    f >> kind;
    if (kind == "T") {
      e.timer = true;
    } else if (kind == "A") {
      f >> e.client;
    } else {
      *error = std::string("bad event line: ") + line;
      return tr;
    }
    f >> t;
    if (!f) {
      *error = std::string("bad event line: ") + line;
      return tr;
    }
    e.t = std::strtod(t.c_str(), nullptr);
    e.t_text = t;
    tr.events.push_back(std::move(e));
  }
  if (!have_params) *error = "no '# params' line";
  return tr;
}

inline std::string CompassIds(const std::vector<aggregator::CompassUpdateRef>& refs) {
  std::string s;
  for (const auto& u : refs) {
    if (!s.empty()) s += ',';
    s += std::to_string(u.client);
  }
  return s;
}

inline std::string CompassAssignments(const std::vector<aggregator::CompassAssignment>& as) {
  std::string s;
  for (const auto& a : as) {
    if (!s.empty()) s += ' ';
    s += std::to_string(a.client);
    s += ':';
    s += std::to_string(a.local_steps);
    s += ':';
    s += std::to_string(a.group);
  }
  return s;
}

inline std::string CompassAggregateText(const aggregator::CompassDecision& d) {
  std::string s = "aggregate ";
  s += std::to_string(d.group);
  s += " members=";
  s += CompassIds(d.group_updates);
  s += " general=";
  s += CompassIds(d.general_updates);
  s += " -> ";
  s += CompassAssignments(d.assignments);
  return s;
}

// Shoal's answer to each event of the trace, in the trace's format (one line per event).
inline std::vector<std::string> ReplayCompassTrace(const CompassTrace& tr) {
  using aggregator::CompassAction;
  aggregator::FedCompassScheduler s(tr.params);
  s.Start(0);
  std::vector<std::string> out;
  for (const CompassTraceEvent& e : tr.events) {
    std::string head = e.timer ? std::string("T") : std::string("A ") + std::to_string(e.client);
    head += ' ';
    head += e.t_text;
    if (e.timer) {
      // APPFL's timer fires at (creation time + (T_l - creation time)), which can be a rounding
      // below T_l: fire Shoal's at T_l then.
      std::vector<aggregator::CompassDecision> ds;
      if (auto due = s.NextTimer(); due && *due <= e.t + 1e-9 * std::max(1.0, e.t)) {
        ds = s.OnTimer(std::max(e.t, *due));
      }
      std::string text;
      for (const auto& d : ds) {
        if (!text.empty()) text += " | ";
        text += CompassAggregateText(d);
      }
      out.push_back(head + " " + (text.empty() ? "none" : text));
      continue;
    }
    auto r = s.OnArrival(e.client, e.t);
    if (!r.ok()) {
      out.push_back(head + " error " + r.status().message());
      continue;
    }
    const auto& d = *r;
    switch (d.action) {
      case CompassAction::kApplyAlone:
        out.push_back(head + " alone -> " + CompassAssignments(d.assignments));
        break;
      case CompassAction::kBufferedGeneral:
        out.push_back(head + " general -> " + CompassAssignments(d.assignments));
        break;
      case CompassAction::kBufferedInGroup:
        out.push_back(head + " wait " + std::to_string(d.group));
        break;
      case CompassAction::kAggregateGroup:
        out.push_back(head + " " + CompassAggregateText(d));
        break;
    }
  }
  return out;
}

}  // namespace shoal::testing
