#include "shoal/control/controller/node_views.h"

#include <algorithm>
#include <future>

#include "shoal/common/http/http_client.h"

namespace shoal::controller {

using json = nlohmann::json;

std::vector<NodeAnswer> AskNodes(const std::vector<cluster::NodeEntry>& nodes,
                                 const std::string& path, const std::string& authorization) {
  std::vector<std::future<NodeAnswer>> asks;
  for (const auto& n : nodes) {
    asks.push_back(std::async(std::launch::async, [&n, &path, &authorization] {
      NodeAnswer a;
      a.node = n.record.name;
      if (n.record.control.empty()) {
        a.error = "the node published no control API address";
        return a;
      }
      // The node's own token check answers; a node that does not within 4 s is reported so.
      client::HttpClient c(n.record.control);
      client::HttpRequest req;
      req.path = path;
      req.headers.push_back("Authorization: " + authorization);
      req.timeout_ms = 4000;
      std::string error;
      auto r = c.Send(req, &error);
      if (!r) {
        a.error = n.record.control + ": " + error;
        return a;
      }
      a.body = json::parse(r->body, nullptr, false);
      if (r->status != 200) {
        a.error = n.record.control + " answered " + std::to_string(r->status) +
                  (a.body.is_object() ? ": " + a.body.value("error", std::string()) : "");
        return a;
      }
      a.ok = a.body.is_object();
      if (!a.ok) a.error = n.record.control + ": not a JSON object";
      return a;
    }));
  }
  std::vector<NodeAnswer> out;
  for (auto& f : asks) out.push_back(f.get());
  return out;
}

json ClusterTop(const std::vector<cluster::NodeEntry>& nodes, const std::string& authorization) {
  json rows = json::array();
  json unreachable = json::array();
  for (auto& a : AskNodes(nodes, "/v1/top", authorization)) {
    if (!a.ok) {
      unreachable.push_back({{"node", a.node}, {"error", a.error}});
      continue;
    }
    for (json row : a.body.value("functions", json::array())) {
      row["node"] = a.node;
      rows.push_back(std::move(row));
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const json& x, const json& y) {
    return x.value("name", "") < y.value("name", "");
  });
  return json{{"dataplane", "cluster (" + std::to_string(nodes.size()) + " nodes)"},
              {"functions", std::move(rows)},
              {"unreachable", std::move(unreachable)}};
}

json ClusterFunctionStatus(const std::vector<cluster::NodeEntry>& nodes,
                           const std::string& function, const std::string& authorization) {
  json sum = {{"ready", 0},       {"starting", 0},       {"inflight", 0},
              {"queued", 0},      {"requests_total", 0}, {"errors_total", 0},
              {"cold_starts", 0}, {"rps", 0.0},          {"p99_ms", 0.0}};
  json instances = json::array();
  json unreachable = json::array();
  for (auto& a : AskNodes(nodes, "/v1/functions/" + function, authorization)) {
    if (!a.ok) {
      unreachable.push_back({{"node", a.node}, {"error", a.error}});
      continue;
    }
    const json st = a.body.value("status", json::object());
    for (const char* k : {"ready", "starting", "inflight", "queued", "requests_total",
                          "errors_total", "cold_starts"}) {
      sum[k] = sum[k].get<uint64_t>() + st.value(k, uint64_t{0});
    }
    sum["rps"] = sum["rps"].get<double>() + st.value("rps", 0.0);
    sum["p99_ms"] = std::max(sum["p99_ms"].get<double>(), st.value("p99_ms", 0.0));
    for (json i : st.value("instances", json::array())) {
      i["node"] = a.node;
      instances.push_back(std::move(i));
    }
  }
  sum["instances"] = std::move(instances);
  sum["unreachable"] = std::move(unreachable);
  return sum;
}

}  // namespace shoal::controller
