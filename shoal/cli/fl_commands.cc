// shoal fl ...: an FL job's status, live progress, model download, list and delete.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "shoal/cli/command_support.h"
#include "shoal/cli/commands.h"
#include "shoal/cli/fl_progress.h"
#include "shoal/cli/progress.h"
#include "shoal/cli/table.h"
#include "shoal/serving/export/model_onnx.h"

namespace shoal::cli {

// ---- FL jobs ----------------------------------------------------------------------------
//
// GET /v1/jobs/{job} answers the coordinator's status JSON, and GET /v1/jobs {"jobs": [...]}
// of them:
//   {"name": "fmnist", "algorithm": "fedcompass", "state": "running" | "done",
//    "version": 12, "round": 12, "clients": {"expected": 16, "joined": 16},
//    "updates_total": 190, "elapsed_s": 83.4, "target_accuracy": 0.85, "target_rounds": 60,
//    "best_accuracy": 0.8123 | null,
//    "versions": [{"version": 1, "accuracy": 0.7012 | null, "loss": 0.8123 | null,
//                  "updates": 16, "elapsed_s": 4.2}, ...]}
// accuracy and loss stay null until a client reports an evaluation of that version.

namespace {

std::string Accuracy(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return "-";
  return FormatFixed(j[key].get<double>(), 4);
}

std::string Elapsed(double seconds) { return FormatFixed(seconds, 1) + "s"; }

std::vector<std::string> VersionRow(const json& v) {
  return {std::to_string(Num<uint64_t>(v, "version")), Accuracy(v, "accuracy"), Accuracy(v, "loss"),
          std::to_string(Num<uint64_t>(v, "updates")), Elapsed(Num<double>(v, "elapsed_s"))};
}

const std::vector<std::string> kVersionHeader = {"VERSION", "ACCURACY", "LOSS", "UPDATES", "TIME"};

json SortedVersions(const json& status) {
  json versions = status.value("versions", json::array());
  if (!versions.is_array()) return json::array();
  std::stable_sort(versions.begin(), versions.end(), [](const json& a, const json& b) {
    return Num<uint64_t>(a, "version") < Num<uint64_t>(b, "version");
  });
  return versions;
}

std::string ClientsText(const json& st) {
  const json& c = st.value("clients", json::object());
  return std::to_string(Num<uint64_t>(c, "joined")) + "/" +
         std::to_string(Num<uint64_t>(c, "expected"));
}

std::string TargetText(const json& st) {
  return Num<double>(st, "target_accuracy") > 0 ? FormatFixed(Num<double>(st, "target_accuracy"), 4)
                                                : "none";
}

void FailWith(const HttpResponse& r) {
  std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
  throw Exit{1};
}

}  // namespace

namespace {

// spec.aggregation.robust: the rule, and the clients whose updates it excluded or
// down-weighted (suspects) with what it made of their latest update.
void RobustText(const json& st, std::ostringstream& o) {
  const json& r = st["robust"];
  std::string rule = Str(r, "rule");
  if (r.contains("beta")) rule += " (beta " + FormatFixed(Num<double>(r, "beta"), 2) + ")";
  if (r.contains("f")) {
    rule += " (f " + std::to_string(Num<uint64_t>(r, "f")) + ", m " +
            std::to_string(Num<uint64_t>(r, "m")) + ")";
  }
  if (r.contains("rank")) rule += " (rank " + std::to_string(Num<uint64_t>(r, "rank")) + ")";
  if (r.contains("clip_norm") && r["clip_norm"].is_number()) {
    rule += ", clipNorm " + FormatFixed(r["clip_norm"].get<double>(), 3);
  } else if (r.contains("clip_norm") && r["clip_norm"].is_string()) {
    rule += ", clipNorm " + r["clip_norm"].get<std::string>();
  }
  o << "Robust:" << std::string(8, ' ') << rule << "\n";
  const json& suspects = r.contains("suspects") ? r["suspects"] : json::array();
  if (suspects.empty()) {
    o << "Suspects:      <none>\n";
    return;
  }
  // The latest verdict per client from the status's client list.
  std::map<std::string, json> last;
  if (st.contains("clients") && st["clients"].contains("list")) {
    for (const json& c : st["clients"]["list"]) last[Str(c, "id")] = c.value("robust", json());
  }
  o << "Suspects:\n";
  Table t({"CLIENT", "NAME", "SUSPECT", "UPDATES", "LAST-WEIGHT", "KRUM-SCORE", "CLIP-SCALE"});
  for (const json& s : suspects) {
    const json& v = last[Str(s, "id")];
    auto num = [&v](const char* k, int digits) {
      return v.is_object() && v.contains(k) && v[k].is_number()
                 ? FormatFixed(v[k].get<double>(), digits)
                 : std::string("-");
    };
    t.AddRow({Str(s, "id"), Str(s, "name"), std::to_string(Num<uint64_t>(s, "suspect_updates")),
              std::to_string(Num<uint64_t>(s, "updates")), num("weight", 3), num("krum_score", 1),
              num("clip_scale", 3)});
  }
  std::istringstream lines(t.Render());
  for (std::string line; std::getline(lines, line);) o << "  " << line << "\n";
}

}  // namespace

int FlStatus(const HttpClient& client, const std::string& job) try {
  const json st = GetJson(client, "/v1/jobs/" + job);
  std::ostringstream o;
  auto field = [&o](const std::string& k, const std::string& v) {
    o << k << ":" << std::string(k.size() < 14 ? 14 - k.size() : 1, ' ') << v << "\n";
  };
  field("Name", Str(st, "name"));
  field("Algorithm", Str(st, "algorithm"));
  field("State", Str(st, "state"));
  field("Version", std::to_string(Num<uint64_t>(st, "version")) + " (round " +
                       std::to_string(Num<uint64_t>(st, "round")) + ")");
  field("Clients", ClientsText(st) + " joined");
  field("Updates", std::to_string(Num<uint64_t>(st, "updates_total")));
  field("Elapsed", Elapsed(Num<double>(st, "elapsed_s")));
  field("Accuracy", "best " + Accuracy(st, "best_accuracy") + ", target " + TargetText(st));
  if (st.contains("robust") && st["robust"].is_object()) RobustText(st, o);
  o << "Versions:\n";
  const json versions = SortedVersions(st);
  if (versions.empty()) {
    o << "  <none>\n";
  } else {
    Table t(kVersionHeader);
    for (const json& v : versions) t.AddRow(VersionRow(v));
    std::istringstream lines(t.Render());
    for (std::string line; std::getline(lines, line);) o << "  " << line << "\n";
  }
  std::fputs(o.str().c_str(), stdout);
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int FlWatch(const HttpClient& client, const std::string& job, const WatchOptions& options) try {
  const OutputMode mode = DetectOutputMode(STDOUT_FILENO, options.json);
  TerminalSession session(STDOUT_FILENO, mode);
  TerminalBlock block(TerminalWidth(STDOUT_FILENO));
  bool seen = false;      // the job answered once: a 404 now means it was deleted
  std::string last_line;  // plain and JSON: a line only when something changed
  for (;;) {
    HttpRequest req;
    req.path = "/v1/jobs/" + job;
    const HttpResponse r = SendOrExit(client, req);
    if (r.status == 404 && seen) {
      std::fprintf(stderr, "shoal: fljob/%s was deleted while it was watched\n", job.c_str());
      return 1;
    }
    if (r.status >= 400) FailWith(r);
    const json st = json::parse(r.body, nullptr, false);
    if (st.is_discarded() || !st.is_object()) {
      std::fprintf(stderr, "shoal: %s answered %s with something that is not JSON\n",
                   client.base_url().c_str(), req.path.c_str());
      return 1;
    }
    seen = true;
    FlJobProgress p = JobProgress(st);
    if (p.name.empty()) p.name = job;
    if (mode == OutputMode::kTerminal) {
      const int width = TerminalWidth(STDOUT_FILENO);
      block.set_width(width);
      WriteAll(STDOUT_FILENO, block.Frame(ProgressBlock(p, width)));
    } else {
      // Keyed on what a reader follows (not the ever-moving elapsed time and rates).
      const std::string key = std::to_string(p.version) + "/" +
                              std::to_string(p.evaluated_version.value_or(0)) + "/" + p.state;
      if (key != last_line) {
        const std::string line =
            mode == OutputMode::kJson ? ProgressJson(p).dump() : ProgressLine(p);
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        last_line = key;
      }
    }
    if (p.done()) {
      if (mode != OutputMode::kJson) std::printf("%s\n", DoneLine(p).c_str());
      return 0;
    }
    if (p.failed()) {
      const std::string why = Str(st, "error");
      std::fprintf(stderr, "shoal: fljob/%s failed (state '%s')%s%s\n", job.c_str(),
                   p.state.c_str(), why.empty() ? "" : ": ", why.c_str());
      return 1;
    }
    SleepSeconds(options.interval_s);
  }
} catch (const Exit& e) {
  return e.code;
}

namespace {

// The job's model version as an ONNX graph: the architecture the job's status describes, with
// the version's tensors (the safetensors the server hands out) as its weights (the conversion
// shoald's ?format=onnx runs too).
std::string ModelAsOnnx(const HttpClient& client, const std::string& job, const std::string& body) {
  auto onnx = inference::JobModelAsOnnx(GetJson(client, "/v1/jobs/" + job).dump(), body);
  if (!onnx.ok()) {
    std::fprintf(stderr, "shoal: job %s: %s; use --format safetensors\n", job.c_str(),
                 onnx.status().message().c_str());
    throw Exit{1};
  }
  return std::move(*onnx);
}

}  // namespace

int FlModel(const HttpClient& client, const std::string& job, const std::string& output,
            const std::optional<uint64_t>& version, const std::string& format) try {
  HttpRequest req;
  req.path = "/v1/jobs/" + job + "/model";
  if (version) req.path += "?version=" + std::to_string(*version);
  // A job whose model is an ONNX file of its own (spec.model.onnx): shoald, which reads that
  // file, writes the version into it (?format=onnx); the built-in architectures convert here.
  bool server_onnx = false;
  if (format == "onnx") {
    const json st = GetJson(client, "/v1/jobs/" + job);
    const json m = st.value("model", json::object());
    server_onnx = m.is_object() && m.contains("onnx") && m["onnx"].is_string();
    if (server_onnx) req.path += version ? "&format=onnx" : "?format=onnx";
  }
  // A terminal sees the download as a bar (bytes of Content-Length), redrawn at most 10 times
  // a second and replaced by the final line; a pipe sees only that line.
  const bool live = DetectOutputMode(STDOUT_FILENO, false) == OutputMode::kTerminal;
  const int width = TerminalWidth(STDOUT_FILENO);
  bool drawn = false;
  auto last_draw = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  if (live) {
    req.progress = [&](int64_t received, int64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (received == 0 || now - last_draw < std::chrono::milliseconds(100)) return;
      last_draw = now;
      std::string line = "downloading " + job + " ";
      if (total > 0) {
        const double f = static_cast<double>(received) / static_cast<double>(total);
        line += RenderBar(f, 30) + " " + FormatPercent(f) + " ";
      }
      WriteAll(STDOUT_FILENO, RewriteLine(line + FormatByteProgress(received, total), width));
      drawn = true;
    };
  }
  HttpResponse r = SendOrExit(client, req);
  if (drawn) WriteAll(STDOUT_FILENO, ClearLine());
  if (r.status >= 400) FailWith(r);
  auto v = r.headers.find("x-shoal-model-version");
  const std::string got = v != r.headers.end() ? v->second : "?";
  const std::string bytes =
      format == "onnx" && !server_onnx ? ModelAsOnnx(client, job, r.body) : r.body;
  {
    std::ofstream out(output, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::fprintf(stderr, "shoal: cannot write %s\n", output.c_str());
      return 1;
    }
  }
  std::printf("wrote %s (version %s%s, %zu bytes)\n", output.c_str(), got.c_str(),
              server_onnx        ? ", the job's ONNX graph"
              : format == "onnx" ? ", ONNX opset 13"
                                 : "",
              bytes.size());
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int FlList(const HttpClient& client) try {
  const json answer = GetJson(client, "/v1/jobs");
  const json jobs = answer.value("jobs", json::array());
  if (jobs.empty()) {
    std::fprintf(stderr, "No FL jobs deployed.\n");
    return 0;
  }
  Table t({"NAME", "ALGORITHM", "STATE", "VERSION", "CLIENTS", "BEST-ACCURACY", "ELAPSED"});
  for (const json& st : jobs) {
    t.AddRow({Str(st, "name"), Str(st, "algorithm"), Str(st, "state"),
              std::to_string(Num<uint64_t>(st, "version")), ClientsText(st),
              Accuracy(st, "best_accuracy"), Elapsed(Num<double>(st, "elapsed_s"))});
  }
  std::fputs(t.Render().c_str(), stdout);
  return 0;
} catch (const Exit& e) {
  return e.code;
}

}  // namespace shoal::cli
