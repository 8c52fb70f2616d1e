#include "shoal/controller/control_api.h"

#include <charconv>
#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>

namespace shoal {
namespace {

using nlohmann::json;

constexpr uint64_t kDefaultLogBytes = 1 << 20;
constexpr uint64_t kMaxLogBytes = 16 << 20;

HttpReply Json(int status, const json& j) {
  HttpReply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = j.dump() + "\n";
  return r;
}

HttpReply Error(int status, const std::string& message) {
  return Json(status, json{{"error", message}});
}

HttpReply MethodNotAllowed(std::string_view method, std::string_view path, const char* allow) {
  HttpReply r = Error(405, "method " + std::string(method) + " not allowed on " +
                               std::string(path) + " (allowed: " + allow + ")");
  r.headers.emplace_back("Allow", allow);
  return r;
}

json FunctionJson(const FunctionSpec& s) {
  json handler = json::object();
  if (!s.handler.builtin.empty()) {
    handler["builtin"] = s.handler.builtin;
  } else {
    handler["library"] = s.handler.library;
    handler["symbol"] = s.handler.symbol;
  }
  handler["env"] = s.handler.env;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return json{
      {"id", s.id},
      {"name", s.name},
      {"namespace", s.tenant},
      {"labels", s.labels},
      {"handler", handler},
      {"concurrency", s.concurrency},
      {"scale", {{"min", s.min_scale}, {"max", s.max_scale}}},
      {"timeout_s", s.timeout_s},
      {"keep_alive_s", s.keep_alive_s},
      {"max_body_bytes", s.max_body_bytes},
      {"resources", {{"cpu", s.cpu}, {"memory_bytes", s.memory_bytes}, {"gpu", s.gpu}}},
      {"generation", s.generation},
      {"created_unix_ms", s.created_unix_ms},
      {"updated_unix_ms", s.updated_unix_ms},
      {"age_s", s.created_unix_ms > 0 ? static_cast<double>(now - s.created_unix_ms) / 1000 : 0.0},
      {"manifest", s.manifest},
  };
}

json StatsJson(const FunctionStats& st, bool with_instances) {
  json j{
      {"desired", st.desired},
      {"ready", st.ready},
      {"starting", st.starting},
      {"inflight", st.inflight},
      {"queued", st.queued},
      {"rps", st.rps},
      {"p50_ms", st.p50_ms},
      {"p99_ms", st.p99_ms},
      {"requests_total", st.requests_total},
      {"errors_total", st.errors_total},
      {"cold_starts", st.cold_starts},
      {"last_cold_start_ms", st.last_cold_start_ms},
      {"bpf_events", st.bpf_events},
      {"bpf_bytes", st.bpf_bytes},
      {"instances_total", st.instances.size()},
  };
  if (with_instances) {
    json instances = json::array();
    for (const InstanceInfo& i : st.instances) {
      instances.push_back({{"id", i.id},
                           {"pid", i.pid},
                           {"state", i.state},
                           {"inflight", i.inflight},
                           {"served", i.served},
                           {"age_s", i.age_s},
                           {"cold_start_ms", i.cold_start_ms},
                           {"restarts", i.restarts}});
    }
    j["instances"] = std::move(instances);
  }
  return j;
}

// Reads `key` from a query string as an unsigned integer; false when present but malformed.
bool QueryUint(std::string_view query, std::string_view key, uint64_t* out) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != key) continue;
    std::string_view v = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
    return ec == std::errc() && p == v.data() + v.size() && !v.empty();
  }
  return true;
}

}  // namespace

ControlApi::ControlApi(FunctionRegistry& registry, RuntimeView& runtime)
    : registry_(registry), runtime_(runtime) {}

HttpReply ControlApi::Handle(std::string_view method, std::string_view path,
                             std::string_view query, std::string_view body) {
  try {
    std::string_view rest = path;
    while (rest.size() > 1 && rest.back() == '/') rest.remove_suffix(1);
    if (!rest.starts_with("/v1/")) return Error(404, "no route " + std::string(path));
    rest.remove_prefix(4);

    if (rest == "functions") {
      if (method == "GET") return ListFunctions();
      if (method == "POST") return Deploy(body);
      return MethodNotAllowed(method, path, "GET, POST");
    }
    if (rest.starts_with("functions/")) {
      rest.remove_prefix(10);
      const size_t slash = rest.find('/');
      const std::string name(rest.substr(0, slash));
      const std::string_view sub =
          slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
      if (name.empty()) return Error(404, "no route " + std::string(path));
      if (sub.empty()) {
        if (method == "GET") return GetFunction(name);
        if (method == "DELETE") return DeleteFunction(name);
        return MethodNotAllowed(method, path, "GET, DELETE");
      }
      if (sub == "logs") {
        if (method == "GET") return Logs(name, query);
        return MethodNotAllowed(method, path, "GET");
      }
      return Error(404, "no route " + std::string(path));
    }
    if (rest == "top") {
      if (method == "GET") return Top();
      return MethodNotAllowed(method, path, "GET");
    }
    if (rest == "node") {
      if (method == "GET") return Node();
      return MethodNotAllowed(method, path, "GET");
    }
    return Error(404, "no route " + std::string(path));
  } catch (const std::exception& e) {
    return Error(500, std::string("internal error: ") + e.what());
  }
}

HttpReply ControlApi::Deploy(std::string_view body) {
  auto deployed = registry_.Deploy(body);
  if (!deployed.ok()) {
    return Error(HttpStatusFor(deployed.status().code()), deployed.status().message());
  }
  runtime_.FunctionsChanged();
  bool created = false;  // 201 when any function is new, 200 when all were updates
  json list = json::array();
  for (const FunctionSpec& s : *deployed) {
    json j = FunctionJson(s);
    j["action"] = s.generation == 1 ? "created" : "configured";
    created = created || s.generation == 1;
    list.push_back(std::move(j));
  }
  return Json(created ? 201 : 200, json{{"functions", std::move(list)}});
}

HttpReply ControlApi::ListFunctions() {
  json list = json::array();
  for (const FunctionSpec& s : registry_.List()) {
    json j = FunctionJson(s);
    j["status"] = StatsJson(runtime_.Stats(s.name), false);
    list.push_back(std::move(j));
  }
  return Json(200, json{{"functions", std::move(list)}});
}

HttpReply ControlApi::GetFunction(const std::string& name) {
  auto spec = registry_.Get(name);
  if (!spec) return Error(404, "function '" + name + "' not found");
  json j = FunctionJson(*spec);
  j["status"] = StatsJson(runtime_.Stats(name), true);
  return Json(200, j);
}

HttpReply ControlApi::DeleteFunction(const std::string& name) {
  Status st = registry_.Delete(name);
  if (!st.ok()) return Error(HttpStatusFor(st.code()), st.message());
  runtime_.FunctionsChanged();
  return Json(200, json{{"deleted", name}});
}

HttpReply ControlApi::Logs(const std::string& name, std::string_view query) {
  if (!registry_.Get(name)) return Error(404, "function '" + name + "' not found");
  uint64_t offset = 0;
  uint64_t max = kDefaultLogBytes;
  if (!QueryUint(query, "offset", &offset)) return Error(400, "offset: must be an integer");
  if (!QueryUint(query, "max", &max)) return Error(400, "max: must be an integer");
  max = std::min(std::max<uint64_t>(max, 1), kMaxLogBytes);
  LogChunk chunk = runtime_.Logs(name, offset, max);
  HttpReply r;
  r.status = 200;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(chunk.text);
  r.headers.emplace_back("X-Shoal-Next-Offset", std::to_string(chunk.next_offset));
  return r;
}

HttpReply ControlApi::Top() {
  json list = json::array();
  for (const FunctionSpec& s : registry_.List()) {
    const FunctionStats st = runtime_.Stats(s.name);
    list.push_back({{"name", s.name},
                    {"desired", st.desired},
                    {"ready", st.ready},
                    {"starting", st.starting},
                    {"inflight", st.inflight},
                    {"queued", st.queued},
                    {"rps", st.rps},
                    {"p50_ms", st.p50_ms},
                    {"p99_ms", st.p99_ms},
                    {"requests_total", st.requests_total},
                    {"errors_total", st.errors_total},
                    {"cold_starts", st.cold_starts},
                    {"last_cold_start_ms", st.last_cold_start_ms},
                    {"bpf_events", st.bpf_events}});
  }
  return Json(200, json{{"dataplane", runtime_.DataPlaneMode()}, {"functions", std::move(list)}});
}

HttpReply ControlApi::Node() {
  return Json(200, json{{"dataplane", runtime_.DataPlaneMode()},
                        {"version", kShoalVersion},
                        {"node", registry_.config().node_name},
                        {"functions", registry_.List().size()}});
}

}  // namespace shoal
