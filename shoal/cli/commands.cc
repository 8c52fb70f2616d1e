#include "shoal/cli/commands.h"

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
#include "shoal/cli/fl_progress.h"
#include "shoal/cli/progress.h"
#include "shoal/cli/table.h"
#include "shoal/serving/export/model_onnx.h"

namespace shoal::cli {
namespace {

std::string HandlerText(const json& f) {
  const json& h = f.value("handler", json::object());
  if (!Str(h, "builtin").empty()) return "builtin:" + Str(h, "builtin");
  std::string s = "library:" + Str(h, "library");
  if (Str(h, "symbol") != "shoal_handle") s += ":" + Str(h, "symbol");
  return s;
}

std::string ReadyText(const json& status) {
  return std::to_string(Num<uint64_t>(status, "ready")) + "/" +
         std::to_string(Num<uint64_t>(status, "desired"));
}

std::string ScaleText(const json& f) {
  const json& s = f.value("scale", json::object());
  return std::to_string(Num<uint64_t>(s, "min")) + ".." + std::to_string(Num<uint64_t>(s, "max"));
}

std::string MapText(const json& m) {
  std::string out;
  if (!m.is_object()) return out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!out.empty()) out += ",";
    out += it.key() + "=" +
           (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  }
  return out;
}

}  // namespace

namespace {

// The manifests `-f` names, in the order they are applied: a directory stands for its *.yaml,
// *.yml and *.json files in name order (not its subdirectories).
std::vector<std::string> ManifestFiles(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  for (const std::string& a : args) {
    std::error_code ec;
    if (a == "-" || !std::filesystem::is_directory(a, ec)) {
      files.push_back(a);
      continue;
    }
    std::vector<std::string> in_dir;
    for (const auto& e : std::filesystem::directory_iterator(a, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file(ec) && (ext == ".yaml" || ext == ".yml" || ext == ".json")) {
        in_dir.push_back(e.path().string());
      }
    }
    if (in_dir.empty()) {
      std::fprintf(stderr, "shoal: no manifests (*.yaml, *.yml, *.json) in %s\n", a.c_str());
      throw Exit{1};
    }
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  return files;
}

// Applies one manifest file; returns the lines that report it, or "" with `*error` set.
std::string DeployOne(const HttpClient& client, const std::string& file, std::string* error) {
  std::string manifest;
  if (file == "-") {
    manifest = ReadAll(std::cin);
  } else {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      *error = "cannot read " + file;
      return "";
    }
    manifest = ReadAll(in);
  }
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/functions";
  req.body = manifest;
  req.headers.push_back("Content-Type: application/yaml");
  HttpResponse r = SendOrExit(client, req);
  if (r.status >= 400) {
    *error = ErrorMessage(r.body);
    return "";
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || (!j.contains("functions") && !j.contains("jobs"))) {
    *error = "unexpected answer: " + r.body;
    return "";
  }
  // The server routes each document by kind: Functions to the registry, FLJobs to the
  // coordinator; both come back here.
  std::string out;
  for (const char* kind : {"functions", "jobs"}) {
    for (const json& f : j.value(kind, json::array())) {
      out += std::string(std::string_view(kind) == "jobs" ? "fljob" : "function") + "/" +
             Str(f, "name") + " " + (Str(f, "action").empty() ? "configured" : Str(f, "action")) +
             "\n";
    }
  }
  return out;
}

}  // namespace

int Deploy(const HttpClient& client, const std::vector<std::string>& args) try {
  const std::vector<std::string> files = ManifestFiles(args);
  const size_t n = files.size();
  // n/N on a terminal only: its line is redrawn under the results as they scroll past.
  const bool live = n > 1 && DetectOutputMode(STDOUT_FILENO, false) == OutputMode::kTerminal;
  const int width = TerminalWidth(STDOUT_FILENO);
  for (size_t i = 0; i < n; ++i) {
    if (live) {
      WriteAll(STDOUT_FILENO,
               RewriteLine(RenderBar(static_cast<double>(i) / static_cast<double>(n), 22) + " " +
                               std::to_string(i + 1) + "/" + std::to_string(n) + " " + files[i],
                           width));
    }
    std::string error;
    const std::string report = DeployOne(client, files[i], &error);
    if (live) WriteAll(STDOUT_FILENO, ClearLine());
    if (!error.empty()) {
      if (n > 1) {
        std::fprintf(stderr, "shoal: %s: %s\nshoal: %zu of %zu manifests applied before it\n",
                     files[i].c_str(), error.c_str(), i, n);
      } else {
        std::fprintf(stderr, "shoal: %s\n", error.c_str());
      }
      return 1;
    }
    std::fputs(report.c_str(), stdout);
    std::fflush(stdout);
  }
  if (n > 1) std::printf("%zu manifests applied\n", n);
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int Get(const HttpClient& client, const std::string& name, const std::string& output) try {
  json answer = GetJson(client, name.empty() ? "/v1/functions" : "/v1/functions/" + name);
  if (output == "json") {
    std::printf("%s\n", answer.dump(2).c_str());
    return 0;
  }
  json functions = name.empty() ? answer.value("functions", json::array()) : json::array({answer});
  if (output == "yaml") {
    bool first = true;
    for (const json& f : functions) {
      std::string m = Str(f, "manifest");
      if (!m.empty() && m.back() != '\n') m += '\n';
      std::printf("%s%s", first ? "" : "---\n", m.c_str());
      first = false;
    }
    return 0;
  }
  if (functions.empty()) {
    std::fprintf(stderr, "No functions deployed.\n");
    return 0;
  }
  const bool wide = output == "wide";
  // Cluster functions (from shoal-controller) say which nodes run them.
  const bool placed = std::any_of(functions.begin(), functions.end(),
                                  [](const json& f) { return f.contains("placements"); });
  std::vector<std::string> header = {"NAME", "READY", "INFLIGHT", "RPS", "AGE"};
  if (placed) header.push_back("NODES");
  if (wide) {
    header.insert(header.end(),
                  {"HANDLER", "CONCURRENCY", "SCALE", "TIMEOUT", "NAMESPACE", "GENERATION"});
  }
  Table table(header);
  for (const json& f : functions) {
    const json& st = f.value("status", json::object());
    std::vector<std::string> row = {
        Str(f, "name"), ReadyText(st), std::to_string(Num<uint64_t>(st, "inflight")),
        FormatFixed(Num<double>(st, "rps"), 1), FormatAge(Num<double>(f, "age_s"))};
    if (placed) {
      std::string nodes;
      for (const json& p : f.value("placements", json::array())) {
        if (!nodes.empty()) nodes.append(",");
        nodes.append(Str(p, "node"));
      }
      row.push_back(nodes.empty() ? "-" : nodes);
    }
    if (wide) {
      row.insert(row.end(), {HandlerText(f), std::to_string(Num<uint64_t>(f, "concurrency")),
                             ScaleText(f), FormatSeconds(Num<double>(f, "timeout_s")),
                             Str(f, "namespace"), std::to_string(Num<uint64_t>(f, "generation"))});
    }
    table.AddRow(std::move(row));
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int Describe(const HttpClient& client, const std::string& name) try {
  const json f = GetJson(client, "/v1/functions/" + name);
  const json& st = f.value("status", json::object());
  const json& res = f.value("resources", json::object());
  std::ostringstream o;
  auto field = [&o](const std::string& k, const std::string& v) {
    o << k << ":" << std::string(k.size() < 14 ? 14 - k.size() : 1, ' ') << v << "\n";
  };
  field("Name", Str(f, "name"));
  field("Namespace", Str(f, "namespace"));
  field("ID", std::to_string(Num<uint64_t>(f, "id")));
  field("Generation", std::to_string(Num<uint64_t>(f, "generation")));
  field("Age", FormatAge(Num<double>(f, "age_s")));
  field("Labels", MapText(f.value("labels", json::object())).empty()
                      ? "<none>"
                      : MapText(f.value("labels", json::object())));
  field("Handler", HandlerText(f));
  const std::string env = MapText(f.value("handler", json::object()).value("env", json::object()));
  field("Env", env.empty() ? "<none>" : env);
  field("Concurrency", std::to_string(Num<uint64_t>(f, "concurrency")) + " per instance");
  field("Scale", ScaleText(f));
  field("Timeout", FormatSeconds(Num<double>(f, "timeout_s")));
  field("Keep-alive", FormatSeconds(Num<double>(f, "keep_alive_s")));
  const json& as = f.value("autoscaling", json::object());
  {
    std::string a = Str(as, "policy").empty() ? "none" : Str(as, "policy");
    if (Num<double>(as, "target") > 0) {
      a.append(", target ").append(FormatFixed(Num<double>(as, "target"), 1));
      if (Str(as, "metric") == "tokensInFlight") a.append(" tokens in flight");
    }
    if (!Str(as, "keep_alive").empty()) a.append(", keep-alive ").append(Str(as, "keep_alive"));
    std::string params;
    const json params_json = as.value("params", json::object());
    for (const auto& [k, v] : params_json.items()) {
      char val[32];
      std::snprintf(val, sizeof val, "%g", v.is_number() ? v.get<double>() : 0.0);
      if (!params.empty()) params.append(", ");
      params.append(k).append("=").append(val);
    }
    if (!params.empty()) a.append(" (").append(params).append(")");
    if (!Str(as, "policy_file").empty()) a.append(", policy file ").append(Str(as, "policy_file"));
    field("Autoscaling", a);
  }
  field("Max body", FormatBytes(Num<uint64_t>(f, "max_body_bytes")));
  char cpu[32];
  std::snprintf(cpu, sizeof cpu, "%g", Num<double>(res, "cpu"));
  field("Resources", std::string("cpu ") + cpu + ", memory " +
                         FormatBytes(Num<uint64_t>(res, "memory_bytes")) + ", gpu " +
                         std::to_string(Num<uint64_t>(res, "gpu")));
  if (f.contains("placements") && f["placements"].is_array()) {
    // A cluster function (from shoal-controller): the nodes that run it, with their share.
    o << "Placements:\n";
    if (f["placements"].empty()) o << "  <none: no node holds it yet>\n";
    for (const json& p : f["placements"]) {
      o << "  " << Str(p, "node") << "   min " << Num<uint64_t>(p, "min") << ", max "
        << Num<uint64_t>(p, "max") << " instance(s), generation " << Num<uint64_t>(p, "generation")
        << "\n";
    }
  }
  o << "Status:\n";
  o << "  Instances:   " << ReadyText(st) << " ready (" << Num<uint64_t>(st, "starting")
    << " starting)\n";
  o << "  In-flight:   " << Num<uint64_t>(st, "inflight")
    << "   Queued: " << Num<uint64_t>(st, "queued") << "\n";
  o << "  Requests:    " << Num<uint64_t>(st, "requests_total") << " ("
    << Num<uint64_t>(st, "errors_total") << " errors)   " << FormatFixed(Num<double>(st, "rps"), 1)
    << " req/s   p50 " << FormatMs(Num<double>(st, "p50_ms")) << "   p99 "
    << FormatMs(Num<double>(st, "p99_ms")) << "\n";
  o << "  Cold starts: " << Num<uint64_t>(st, "cold_starts") << " (last "
    << FormatMs(Num<double>(st, "last_cold_start_ms")) << "), "
    << Num<uint64_t>(st, "cold_starts_avoided") << " avoided by "
    << Num<uint64_t>(st, "prewarm_starts") << " pre-warm(s)\n";
  if (!Str(st, "unschedulable").empty()) {
    o << "  Status:      unschedulable: " << Str(st, "unschedulable") << "\n";
  }
  const json& d = st.value("decision", json::object());
  o << "  Autoscaler:  desired " << Num<uint64_t>(st, "desired") << ", actual "
    << Num<uint64_t>(st, "actual") << " (replicas " << Num<uint64_t>(d, "replicas")
    << " + pre-warm " << Num<uint64_t>(d, "prewarm") << "), keep-alive "
    << FormatSeconds(Num<double>(d, "keep_alive_s")) << ", target "
    << FormatFixed(Num<double>(d, "concurrency_target"), 1) << "/instance"
    << (d.value("panic", false) ? ", panic" : "") << "\n";
  if (!Str(d, "reason").empty()) {
    o << "  Last change: " << Str(d, "reason") << " (" << FormatAge(Num<double>(d, "age_s"))
      << " ago)\n";
  }
  if (st.contains("detector")) {
    // The compromise detector: its state, action and latest anomalies (newest first).
    const json& det = st["detector"];
    o << "  Detector:    " << Str(det, "state") << "; on anomaly: " << Str(det, "on_anomaly")
      << "; " << Num<uint64_t>(det, "anomalies_total") << " anomalies\n";
    for (const json& a : det.value("anomalies", json::array())) {
      char id[32];
      std::snprintf(id, sizeof id, "%#llx",
                    static_cast<unsigned long long>(Num<uint64_t>(a, "instance")));
      o << "    " << FormatAge(Num<double>(a, "age_s")) << " ago  " << id << "  " << Str(a, "kind")
        << "  " << Str(a, "action") << ": " << Str(a, "evidence") << "\n";
    }
  }
  o << "Instances:\n";
  const json instances = st.value("instances", json::array());
  if (instances.empty()) {
    o << "  <none>\n";
  } else {
    // A controller's describe has the instances of every node running the function.
    const bool by_node = std::any_of(instances.begin(), instances.end(),
                                     [](const json& i) { return i.contains("node"); });
    std::vector<std::string> header = {"ID",  "PID",        "STATE", "INFLIGHT", "SERVED",
                                       "AGE", "COLD-START", "START", "RESTARTS"};
    if (by_node) header.insert(header.begin(), "NODE");
    Table t(header);
    std::string notes;
    for (const json& i : instances) {
      char id[32];
      std::snprintf(id, sizeof id, "%#llx",
                    static_cast<unsigned long long>(Num<uint64_t>(i, "id")));
      std::vector<std::string> row = {id,
                                      std::to_string(Num<int64_t>(i, "pid")),
                                      Str(i, "state"),
                                      std::to_string(Num<uint64_t>(i, "inflight")),
                                      std::to_string(Num<uint64_t>(i, "served")),
                                      FormatAge(Num<double>(i, "age_s")),
                                      FormatMs(Num<double>(i, "cold_start_ms")),
                                      Str(i, "start_path").empty() ? "-" : Str(i, "start_path"),
                                      std::to_string(Num<uint64_t>(i, "restarts"))};
      if (by_node) row.insert(row.begin(), Str(i, "node"));
      t.AddRow(row);
      // A spawn where the node forks from zygotes: say why.
      if (!Str(i, "start_note").empty()) {
        notes += "  " + std::string(id) + " spawned: " + Str(i, "start_note") + "\n";
      }
      if (!Str(i, "quarantine").empty()) {
        notes += "  " + std::string(id) + " quarantined: " + Str(i, "quarantine") + "\n";
      }
    }
    std::istringstream lines(t.Render());
    for (std::string line; std::getline(lines, line);) o << "  " << line << "\n";
    o << notes;
  }
  std::fputs(o.str().c_str(), stdout);
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int Invoke(const HttpClient& client, const InvokeOptions& options) try {
  HttpRequest req;
  req.method = !options.method.empty() ? options.method : (options.has_data ? "POST" : "GET");
  std::string sub = options.path;
  while (!sub.empty() && sub.front() == '/') sub.erase(0, 1);
  req.path = "/fn/" + options.name + (sub.empty() ? "" : "/" + sub);
  req.headers = options.headers;
  std::unique_ptr<FILE, decltype(&std::fclose)> file(nullptr, std::fclose);
  std::string stdin_body;  // req.body views it
  if (options.has_data && options.data == "@-") {
    stdin_body = ReadAll(std::cin);
    req.body = stdin_body;
  } else if (options.has_data && options.data.starts_with("@")) {
    const std::string path = options.data.substr(1);
    file.reset(std::fopen(path.c_str(), "rb"));
    struct stat sb {};
    if (!file || fstat(fileno(file.get()), &sb) != 0) {
      std::fprintf(stderr, "shoal: cannot read %s\n", path.c_str());
      return 1;
    }
    req.upload = file.get();
    req.upload_size = S_ISREG(sb.st_mode) ? static_cast<int64_t>(sb.st_size) : -1;
  } else if (options.has_data) {
    req.body = options.data;
  }
  std::string error_body;
  req.sink = [&error_body](long status, std::string_view bytes) {
    if (status >= 400) {
      error_body.append(bytes);
    } else {
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    }
  };
  HttpResponse r = SendOrExit(client, req);
  std::fflush(stdout);
  if (r.status >= 400) {
    std::fprintf(stderr, "HTTP %ld: %s\n", r.status, ErrorMessage(error_body).c_str());
    return 1;
  }
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int Logs(const HttpClient& client, const std::string& name, bool follow) try {
  uint64_t offset = 0;
  for (;;) {
    HttpRequest req;
    req.path = "/v1/functions/" + name + "/logs?offset=" + std::to_string(offset);
    HttpResponse r = SendOrExit(client, req);
    if (r.status >= 400) {
      std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
      return 1;
    }
    std::fwrite(r.body.data(), 1, r.body.size(), stdout);
    std::fflush(stdout);
    auto next = r.headers.find("x-shoal-next-offset");
    const uint64_t next_offset =
        next != r.headers.end() ? std::strtoull(next->second.c_str(), nullptr, 10) : offset;
    const bool more = next_offset > offset && !r.body.empty();
    offset = std::max(offset, next_offset);
    if (more) continue;  // drain what is there before waiting
    if (!follow) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
} catch (const Exit& e) {
  return e.code;
}

int Top(const HttpClient& client, const WatchOptions& options) try {
  const OutputMode mode = DetectOutputMode(STDOUT_FILENO, options.json);
  TerminalSession session(STDOUT_FILENO, options.watch ? mode : OutputMode::kPlain);
  for (;;) {
    const json top = GetJson(client, "/v1/top");
    if (mode == OutputMode::kJson) {
      std::printf("%s\n", top.dump().c_str());
      std::fflush(stdout);
      if (!options.watch) return 0;
      SleepSeconds(options.interval_s);
      continue;
    }
    // A controller's top has every node's rows, each naming its node.
    const json rows = top.value("functions", json::array());
    const bool by_node =
        std::any_of(rows.begin(), rows.end(), [](const json& f) { return f.contains("node"); });
    std::vector<std::string> header = {"FUNCTION", "POLICY",      "DESIRED", "ACTUAL",
                                       "INFLIGHT", "QUEUED",      "REQ/S",   "P50",
                                       "P99",      "COLD-STARTS", "AVOIDED", "ANOMALIES"};
    if (by_node) header.insert(header.begin() + 1, "NODE");
    Table t(header);
    for (const json& f : rows) {
      std::string cold = std::to_string(Num<uint64_t>(f, "cold_starts"));
      if (Num<double>(f, "last_cold_start_ms") > 0) {
        cold += " (last " + FormatMs(Num<double>(f, "last_cold_start_ms")) + ")";
      }
      // ACTUAL: ready instances, with those still starting after a "+".
      std::string actual = std::to_string(Num<uint64_t>(f, "ready"));
      if (Num<uint64_t>(f, "starting") > 0) {
        actual.push_back('+');
        actual.append(std::to_string(Num<uint64_t>(f, "starting")));
      }
      std::vector<std::string> row = {
          Str(f, "name"), Str(f, "policy").empty() ? "none" : Str(f, "policy"),
          std::to_string(Num<uint64_t>(f, "desired")), actual,
          std::to_string(Num<uint64_t>(f, "inflight")), std::to_string(Num<uint64_t>(f, "queued")),
          FormatFixed(Num<double>(f, "rps"), 1), FormatMs(Num<double>(f, "p50_ms")),
          FormatMs(Num<double>(f, "p99_ms")), cold,
          std::to_string(Num<uint64_t>(f, "cold_starts_avoided")),
          // The compromise detector's finds, with the instances it keeps quarantined.
          std::to_string(Num<uint64_t>(f, "anomalies_total")) +
              (Num<uint64_t>(f, "quarantined") > 0
                   ? " (" + std::to_string(Num<uint64_t>(f, "quarantined")) + " quarantined)"
                   : "")};
      if (by_node) row.insert(row.begin() + 1, Str(f, "node"));
      t.AddRow(row);
    }
    std::string out = "Data plane: " + Str(top, "dataplane") + "\n";
    out += t.Render();
    for (const json& u : top.value("unreachable", json::array())) {
      out += "node " + Str(u, "node") + " did not answer: " + Str(u, "error") + "\n";
    }
    if (t.rows() == 0) out += "(no functions deployed)\n";
    if (options.watch && mode == OutputMode::kTerminal) {
      // In place: from the top-left corner, each line cleared to its end, then whatever the
      // previous, longer refresh left below; the screen never scrolls or flashes blank.
      std::string frame = "\x1b[H";
      std::istringstream lines(out);
      for (std::string line; std::getline(lines, line);) frame += line + "\x1b[K\n";
      frame += "\x1b[J";
      WriteAll(STDOUT_FILENO, frame);
    } else {
      if (options.watch) out += "\n";  // plain: refreshes one after the other, a blank line apart
      std::fputs(out.c_str(), stdout);
      std::fflush(stdout);
    }
    if (!options.watch) return 0;
    SleepSeconds(options.interval_s);
  }
} catch (const Exit& e) {
  return e.code;
}

}  // namespace shoal::cli
