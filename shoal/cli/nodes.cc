// `shoal get nodes [NAME]`: the cluster's nodes as shoal-controller lists them (GET /v1/nodes),
// or, against a standalone shoald (no /v1/nodes), the one node it is (GET /v1/node).
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shoal/cli/commands.h"
#include "shoal/cli/table.h"

namespace shoal::cli {
namespace {

using nlohmann::json;

std::string Text(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}
double Number(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0;
}

// GET `path`: the JSON answer, or nullopt with the reason printed (404 is returned as such).
std::optional<json> Fetch(const HttpClient& client, const std::string& path, int* status) {
  HttpRequest req;
  req.path = path;
  std::string error;
  auto r = client.Send(req, &error);
  if (!r) {
    std::fprintf(stderr, "shoal: cannot reach %s: %s\n", client.base_url().c_str(), error.c_str());
    *status = 0;
    return std::nullopt;
  }
  *status = r->status;
  auto j = json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    if (r->status != 404) {
      std::fprintf(stderr, "shoal: %s %s: %s\n", client.base_url().c_str(), path.c_str(),
                   !j.is_discarded() && j.is_object() ? Text(j, "error").c_str() : r->body.c_str());
    }
    return std::nullopt;
  }
  if (j.is_discarded()) {
    std::fprintf(stderr, "shoal: %s answered %s with something that is not JSON\n",
                 client.base_url().c_str(), path.c_str());
    return std::nullopt;
  }
  return j;
}

void PrintYaml(const json& j) {
  // JSON is YAML's flow style; the emitter writes it in block style.
  YAML::Emitter out;
  out << YAML::Load(j.dump());
  std::printf("%s\n", out.c_str());
}

}  // namespace

int GetNodes(const HttpClient& client, const std::string& name, const std::string& output) {
  int status = 0;
  auto answer = Fetch(client, "/v1/nodes", &status);
  json nodes = json::array();
  std::string leader;
  if (answer) {
    nodes = answer->value("nodes", json::array());
    leader = Text(*answer, "leader");
  } else if (status == 404) {
    // A standalone shoald: it is the only node.
    auto node = Fetch(client, "/v1/node", &status);
    if (!node) {
      if (status == 404) {
        std::fprintf(stderr,
                     "shoal: %s serves neither /v1/nodes nor /v1/node: is it a shoald or "
                     "a shoal-controller?\n",
                     client.base_url().c_str());
      }
      return 1;
    }
    nodes.push_back({{"name", Text(*node, "node")},
                     {"status", "Ready"},
                     {"role", "standalone"},
                     {"address", client.base_url()},
                     {"version", Text(*node, "version")},
                     {"dataplane", Text(*node, "dataplane")},
                     {"pools", node->value("pools", json::array())}});
  } else {
    return status == 0 ? 2 : 1;
  }
  if (!name.empty()) {
    json one;
    for (const json& n : nodes) {
      if (Text(n, "name") == name) one = n;
    }
    if (one.is_null()) {
      std::fprintf(stderr,
                   "shoal: node '%s' not found (it is not registered, or its lease "
                   "ended)\n",
                   name.c_str());
      return 1;
    }
    nodes = json::array({one});
  }
  if (output == "json") {
    std::printf(
        "%s\n",
        (name.empty() ? json{{"leader", leader}, {"nodes", nodes}} : nodes[0]).dump(2).c_str());
    return 0;
  }
  if (output == "yaml") {
    PrintYaml(name.empty() ? json{{"leader", leader}, {"nodes", nodes}} : nodes[0]);
    return 0;
  }
  if (nodes.empty()) {
    std::fprintf(stderr, "No nodes registered.\n");
    return 0;
  }
  const bool wide = output == "wide";
  std::vector<std::string> header = {"NAME",   "STATUS", "ADDRESS", "CORES",
                                     "MEMORY", "GPUS",   "AGE",     "VERSION"};
  if (wide) header.insert(header.end(), {"COLD-START", "CACHED", "POOLS", "CONTROL"});
  Table table(header);
  const double now_ms = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  for (const json& n : nodes) {
    const double started = Number(n, "started_unix_ms");
    std::string status_text = Text(n, "status").empty() ? "Ready" : Text(n, "status");
    if (const std::string role = Text(n, "role"); !role.empty())
      status_text.append(",").append(role);
    std::vector<std::string> row = {
        Text(n, "name"),
        status_text,
        Text(n, "address"),
        n.contains("cores") ? std::to_string(static_cast<uint64_t>(Number(n, "cores"))) : "-",
        n.contains("memory_mib") ? FormatBytes(static_cast<uint64_t>(Number(n, "memory_mib")) << 20)
                                 : "-",
        n.contains("gpus") ? std::to_string(static_cast<uint64_t>(Number(n, "gpus"))) : "-",
        started > 0 ? FormatAge((now_ms - started) / 1000.0) : "-",
        Text(n, "version")};
    if (wide) {
      std::string pools;
      for (const json& p : n.value("pools", json::array())) {
        if (!pools.empty()) pools += ",";
        pools.append(Text(p, "tenant")).append(":").append(Text(p, "backend"));
      }
      std::string cached;
      for (const json& c : n.value("cached_functions", json::array())) {
        if (!cached.empty()) cached += ",";
        if (c.is_string()) cached += c.get<std::string>();
      }
      std::string cold = "-";
      if (n.contains("cold_start_ms"))
        cold = FormatFixed(Number(n, "cold_start_ms"), 1).append("ms");
      row.insert(row.end(), {cold, cached.empty() ? "-" : cached, pools.empty() ? "-" : pools,
                             Text(n, "control").empty() ? "-" : Text(n, "control")});
    }
    table.AddRow(std::move(row));
  }
  std::fputs(table.Render().c_str(), stdout);
  if (!leader.empty()) std::printf("\nleader controller: %s\n", leader.c_str());
  return 0;
}

}  // namespace shoal::cli
