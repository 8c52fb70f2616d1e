// shoal-controller: the cluster's control plane. Several may run; one is leader through an etcd
// election (the others stand by and take over within the leader's lease TTL). It keeps the
// cluster's node directory from etcd and serves the control API that `shoal --server` talks to:
// GET /v1/nodes and /v1/cluster, cluster functions and their placement, FL jobs (each run by the
// node chosen as its top), the cluster's tokens, and the web console at /ui/.
#include <fcntl.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "shoal/common/command_line.h"
#include "shoal/common/log.h"
#include "shoal/console/console_assets.h"
#include "shoal/control/cluster/cluster_tokens.h"
#include "shoal/control/cluster/election.h"
#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_agent.h"
#include "shoal/control/cluster/node_directory.h"
#include "shoal/control/controller/cluster_autoscaler.h"
#include "shoal/control/controller/cluster_fl_jobs.h"
#include "shoal/control/controller/cluster_functions.h"
#include "shoal/control/controller/controller_api.h"
#include "shoal/control/controller/node_views.h"
#include "shoal/control/kubernetes/cluster_operator.h"
#include "shoal/control/node/manifest.h"
#include "shoal/security/auth/role.h"
#include "shoal/security/auth/token_store.h"

namespace {

using json = nlohmann::json;
std::atomic<httplib::Server*> g_server{nullptr};

using shoal::controller::JsonError;

void Write(const shoal::HttpReply& r, httplib::Response& res) {
  res.status = r.status;
  for (const auto& [k, v] : r.headers) res.set_header(k, v);
  res.set_content(r.shared_body ? *r.shared_body : r.body, r.content_type);
}

// A record an apply deployed, as its reply lists it; the caller adds the record's own field (a
// function's id, a job's top).
json AppliedJson(const shoal::cluster::ManifestRecord& r, bool created) {
  return {{"name", r.name},
          {"namespace", r.tenant},
          {"generation", r.generation},
          {"created", created},
          {"action", created ? "created" : "configured"}};
}

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shoal;
  CLI::App app{
      "shoal-controller: the Shoal cluster's control plane (node directory, leader "
      "election, the /v1 API for `shoal --server`)"};
  std::string etcd, cluster_name = "default", host = "127.0.0.1",
                    state_dir = "/var/lib/shoal-controller";
  std::string name, log_level = "info";
  uint16_t port = 8090;
  int64_t lease_ttl = 5;
  bool allow_insecure = false;
  app.add_option("--etcd", etcd, "etcd client URLs, http://host:port[,...]")->required();
  app.add_option("--cluster", cluster_name, "the cluster's name in etcd");
  app.add_option("--host", host, "listen address of the control API");
  app.add_option("--port", port, "listen port of the control API (0: any free port)");
  app.add_option("--state-dir", state_dir, "this controller's tokens (tokens.json, admin.conf)");
  app.add_option("--name", name, "this controller's identity in the election (default host-pid)");
  app.add_option("--lease-ttl", lease_ttl, "the leader's lease TTL in seconds (take-over time)");
  app.add_flag("--allow-insecure", allow_insecure,
               "listen beyond loopback without TLS (tokens in clear text)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  kubernetes::KubernetesFlags kube;
  kubernetes::AddKubernetesFlags(app, &kube);
  SetExamples(&app, {"shoal-controller --etcd http://127.0.0.1:2379",
                     "shoal-controller --etcd http://etcd-1:2379,http://etcd-2:2379 "
                     "--cluster prod --port 8090 --state-dir /var/lib/shoal-controller"});
  if (auto rc = ParseCommandLine(app, argc, argv)) return *rc;

  auto endpoints = cluster::ParseEndpoints(etcd);
  if (!endpoints.ok()) {
    std::fprintf(stderr, "shoal-controller: --etcd: %s\n", endpoints.status().message().c_str());
    return 2;
  }
  if (cluster_name.empty() || cluster_name.find('/') != std::string::npos) {
    std::fprintf(stderr, "shoal-controller: --cluster: '%s': want a name without '/'\n",
                 cluster_name.c_str());
    return 2;
  }
  if (lease_ttl < 2 || lease_ttl > 60) {
    std::fprintf(stderr, "shoal-controller: --lease-ttl: must be 2 to 60 seconds\n");
    return 2;
  }
  if (!IsLoopback(host) && !allow_insecure) {
    std::fprintf(stderr,
                 "shoal-controller: --host %s is beyond this host: pass --allow-insecure to send "
                 "tokens in clear text (TLS for the controller is not built yet)\n",
                 host.c_str());
    return 2;
  }
  if (name.empty()) {
    char hn[256] = {};
    gethostname(hn, sizeof hn - 1);
    name = std::string(hn) + "-" + std::to_string(getpid());
  }
  std::signal(SIGPIPE, SIG_IGN);
  InitLogging("shoal-controller", log_level);
  spdlog::info("shoal-controller 0.1.0 starting: '{}' for cluster '{}' (etcd {}, state {})", name,
               cluster_name, etcd, state_dir);

  if (mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    spdlog::error("state dir {}: {}", state_dir, std::strerror(errno));
    return 1;
  }
  cluster::EtcdOptions eo;
  eo.endpoints = *endpoints;
  auto client = cluster::EtcdClient::Create(eo);
  if (!client.ok()) {
    spdlog::error("etcd: {}", client.status().ToString());
    return 1;
  }
  std::unique_ptr<cluster::EtcdClient> etcd_client = std::move(*client);
  const cluster::ClusterKeys keys(cluster::ClusterPrefix(cluster_name));
  // The cluster's tokens live in etcd (hashed), shared by every controller and accepted by every
  // node; this controller holds none of its own. Its state dir's tokens.json (on Kubernetes, the
  // Secret's) seeds them at every start.
  auto seed = auth::TokenStore::Open(state_dir + "/tokens.json");
  if (!seed.ok()) {
    spdlog::error("auth: {}", seed.status().ToString());
    return 1;
  }
  auto store = auth::TokenStore::Open("");
  if (!store.ok()) {
    spdlog::error("auth: {}", store.status().ToString());
    return 1;
  }
  std::unique_ptr<auth::TokenStore> tokens = std::move(*store);
  cluster::ClusterTokens cluster_tokens(etcd_client.get(), keys, tokens.get());
  std::string first_admin_token;
  for (int attempt = 0;; ++attempt) {
    Status st = cluster_tokens.Start();
    if (st.ok()) {
      auto imported = cluster_tokens.Import(**seed);
      st = imported.ok() ? Status::Ok() : imported.status();
      if (imported.ok() && *imported > 0) {
        spdlog::info("auth: {} token(s) of {} added to the cluster's", *imported, (*seed)->path());
      }
    }
    Result<std::string> admin = st.ok() ? cluster_tokens.EnsureAdmin() : Result<std::string>(st);
    if (admin.ok()) {
      first_admin_token = *admin;
      break;
    }
    if (attempt == 0) spdlog::warn("etcd: {}; retrying", admin.status().message());
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(2000, 100 << std::min(attempt, 5))));
  }
  spdlog::info("auth: the cluster's {} token(s) under {} (hashed); /v1 needs a bearer token",
               cluster_tokens.List().size(), keys.Tokens());
  controller::ClusterFunctions* functions_ptr = nullptr;  // set below; nodes feed its placement
  controller::ClusterFlJobs* jobs_ptr = nullptr;          // and the moves of FL jobs' tops
  cluster::NodeDirectory nodes(etcd_client.get(), keys, [&](const std::string&, bool) {
    if (functions_ptr != nullptr) functions_ptr->NodesChanged();
    if (jobs_ptr != nullptr) jobs_ptr->NodesChanged();
  });
  for (int attempt = 0;; ++attempt) {
    Status st = nodes.Start();
    if (st.ok()) break;
    if (attempt == 0) spdlog::warn("etcd: {}; retrying", st.message());
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(2000, 100 << std::min(attempt, 5))));
  }
  spdlog::info("nodes: {} registered under {}", nodes.size(), keys.Nodes());
  cluster::ElectionOptions elo;
  elo.lease_ttl_s = lease_ttl;
  controller::ClusterFunctions functions(etcd_client.get(), keys, &nodes);
  functions_ptr = &functions;
  controller::ClusterFlJobs fl_jobs(etcd_client.get(), keys, &nodes);
  jobs_ptr = &fl_jobs;
  // The leader places; a standby only serves the API.
  controller::ClusterAutoscaler autoscaler(etcd_client.get(), keys, &functions);
  std::unique_ptr<kubernetes::ClusterOperator> kube_operator;  // the leader's, with --kubernetes
  if (kube.enabled) {
    auto made = kubernetes::ClusterOperator::Create(kube, etcd_client.get(), keys, &cluster_tokens,
                                                    &nodes, &functions, &fl_jobs);
    if (!made.ok()) {
      spdlog::error("{}", made.status().message());
      return 2;
    }
    kube_operator = std::move(*made);
  }
  cluster::LeaderElection election(etcd_client.get(), keys.Leader(), name, elo, [&](bool leader) {
    if (leader) {
      functions.StartPlacing();
      fl_jobs.StartMoving();
      autoscaler.Start();
      if (kube_operator) kube_operator->Start();
    } else {
      if (kube_operator) kube_operator->Stop();
      autoscaler.Stop();
      fl_jobs.StopMoving();
      functions.StopPlacing();
    }
  });
  election.Start();

  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(4); };
  auto authorize = [&](const httplib::Request& req, httplib::Response& res,
                       auth::Action action) -> bool {
    return controller::Authorize(req, res, *tokens, action);
  };
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [&](const httplib::Request&, httplib::Response& res) {
    const bool etcd_ok = etcd_client->Ping().ok();
    std::string body = std::string(etcd_ok ? "ready\n" : "not ready\n") +
                       "role: " + (election.is_leader() ? "leader" : "standby") +
                       "\netcd: " + (etcd_ok ? "connected" : "unreachable") + "\n";
    res.status = etcd_ok ? 200 : 503;
    res.set_content(body, "text/plain");
  });
  // The web console (the same page as a node's, showing the cluster: it asks /v1/cluster). Its
  // files hold no data, so they are served without a token; its /v1 calls carry one.
  auto ui = [](const httplib::Request& req, httplib::Response& res) {
    Write(console::ServeUi(req.path), res);
  };
  server.Get("/", ui);
  server.Get("/ui", ui);
  server.Get("/ui/.*", ui);
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::ostringstream o;
    o << "# HELP shoal_cluster_nodes_ready Nodes registered with a live lease.\n"
      << "# TYPE shoal_cluster_nodes_ready gauge\nshoal_cluster_nodes_ready " << nodes.size()
      << "\n# HELP shoal_cluster_leader Whether this controller is the leader.\n"
      << "# TYPE shoal_cluster_leader gauge\nshoal_cluster_leader "
      << (election.is_leader() ? 1 : 0)
      << "\n# HELP shoal_cluster_etcd_calls_total Round trips to etcd.\n"
      << "# TYPE shoal_cluster_etcd_calls_total counter\nshoal_cluster_etcd_calls_total "
      << etcd_client->calls()
      << "\n# HELP shoal_cluster_etcd_failures_total Calls no etcd member answered.\n"
      << "# TYPE shoal_cluster_etcd_failures_total counter\nshoal_cluster_etcd_failures_total "
      << etcd_client->failures()
      << "\n# HELP shoal_cluster_etcd_latency_seconds The last etcd round trip.\n"
      << "# TYPE shoal_cluster_etcd_latency_seconds gauge\nshoal_cluster_etcd_latency_seconds "
      << etcd_client->last_latency_us() / 1e6 << "\n"
      << autoscaler.MetricsText();
    res.set_content(o.str(), "text/plain; version=0.0.4");
  });
  server.Get("/v1/nodes", [&](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, auth::Action::kReadNode)) return;
    json list = json::array();
    for (const auto& n : nodes.List()) {
      json pools = json::array();
      for (const auto& p : n.record.pools) {
        pools.push_back({{"tenant", p.tenant}, {"backend", p.backend}, {"bytes", p.bytes}});
      }
      list.push_back({{"name", n.record.name},
                      {"address", n.record.address},
                      {"control", n.record.control},
                      {"status", "Ready"},
                      {"version", n.record.version},
                      {"protocol", std::to_string(n.record.protocol_major) + "." +
                                       std::to_string(n.record.protocol_minor)},
                      {"cores", n.record.cores},
                      {"memory_mib", n.record.memory_mib},
                      {"gpus", n.record.gpus},
                      {"cold_start_ms", n.record.cold_start_ms},
                      {"cached_functions", n.record.cached_functions},
                      {"pools", pools},
                      {"started_unix_ms", n.record.started_unix_ms},
                      {"lease", std::to_string(n.lease)}});
    }
    res.set_content(
        json{{"cluster", cluster_name}, {"leader", election.leader()}, {"nodes", list}}.dump() +
            "\n",
        "application/json");
  });
  auto function_json = [&](const cluster::ClusterFunction& f) {
    json placements = json::array();
    if (auto p = functions.Placements(f.name); p.ok()) {
      for (const auto& [node, pl] : *p) {
        placements.push_back({{"node", node},
                              {"min", pl.min_scale},
                              {"max", pl.max_scale},
                              {"generation", pl.generation}});
      }
    }
    return json{{"name", f.name},
                {"namespace", f.tenant},
                {"id", f.id},
                {"generation", f.generation},
                {"placements", placements},
                {"created_unix_ms", f.created_unix_ms},
                {"updated_unix_ms", f.updated_unix_ms}};
  };
  server.Post("/v1/functions", [&](const httplib::Request& req, httplib::Response& res) {
    // Function and FLJob documents, as a node takes them; all are validated and authorised
    // before anything is written.
    auto who = controller::Authenticate(req, res, *tokens);
    if (!who) return;
    auto parsed = ParseManifests(req.body, NodeConfig{});
    if (!parsed.ok()) {
      JsonError(res, 400, parsed.status().message());
      return;
    }
    std::string function_docs;
    for (const auto& spec : parsed->functions) {
      if (Status st = auth::Authorize(*who, auth::Action::kWrite, spec.tenant); !st.ok()) {
        JsonError(res, 403, st.message());
        return;
      }
      function_docs += (function_docs.empty() ? "" : "---\n") + spec.manifest + "\n";
    }
    for (const auto& spec : parsed->jobs) {
      if (Status st = auth::Authorize(*who, auth::Action::kWrite, spec.tenant); !st.ok()) {
        JsonError(res, 403, st.message());
        return;
      }
      if (auto old = fl_jobs.Get(spec.name); old.ok() && old->record.tenant != spec.tenant) {
        if (Status st = auth::Authorize(*who, auth::Action::kWrite, old->record.tenant); !st.ok()) {
          JsonError(res, 403, st.message());
          return;
        }
      }
    }
    json list = json::array();
    if (!parsed->functions.empty()) {
      auto deployed = functions.Deploy(function_docs);
      if (!deployed.ok()) {
        JsonError(res, HttpStatusFor(deployed.status().code()), deployed.status().message());
        return;
      }
      for (const auto& d : *deployed) {
        list.push_back(AppliedJson(d.function, d.created));
        list.back()["id"] = d.function.id;
      }
    }
    json jobs = json::array();
    if (!parsed->jobs.empty()) {
      auto deployed = fl_jobs.Deploy(parsed->jobs);
      if (!deployed.ok()) {
        JsonError(res, HttpStatusFor(deployed.status().code()),
                  deployed.status().message() +
                      (list.empty() ? "" : " (the manifest's functions were deployed)"));
        return;
      }
      for (const auto& d : *deployed) {
        jobs.push_back(AppliedJson(d.record, d.created));
        jobs.back()["top"] = d.record.top;
      }
    }
    res.status = 201;
    json out{{"functions", list}};
    if (!jobs.empty()) out["jobs"] = jobs;
    res.set_content(out.dump() + "\n", "application/json");
  });
  server.Get("/v1/functions", [&](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, auth::Action::kRead)) return;
    auto all = functions.List();
    if (!all.ok()) {
      JsonError(res, 503, all.status().message());
      return;
    }
    json list = json::array();
    for (const auto& f : *all) list.push_back(function_json(f));
    res.set_content(json{{"functions", list}}.dump() + "\n", "application/json");
  });
  server.Get(R"(/v1/functions/([a-z0-9-]+))",
             [&](const httplib::Request& req, httplib::Response& res) {
               if (!authorize(req, res, auth::Action::kRead)) return;
               auto all = functions.List();
               if (!all.ok()) {
                 JsonError(res, 503, all.status().message());
                 return;
               }
               for (const auto& f : *all) {
                 if (f.name != req.matches[1].str()) continue;
                 json j = function_json(f);
                 // Its live status and instances, from the nodes placed to run it.
                 std::vector<cluster::NodeEntry> placed;
                 for (const auto& n : nodes.List()) {
                   for (const auto& p : j["placements"]) {
                     if (p["node"] == n.record.name) placed.push_back(n);
                   }
                 }
                 j["status"] = controller::ClusterFunctionStatus(
                     placed, f.name, req.get_header_value("Authorization"));
                 res.set_content(j.dump() + "\n", "application/json");
                 return;
               }
               JsonError(res, 404, "no function " + req.matches[1].str());
             });
  server.Get("/v1/top", [&](const httplib::Request& req, httplib::Response& res) {
    // Every node's functions with their load and instances, as each node's own top has them.
    if (!authorize(req, res, auth::Action::kReadNode)) return;
    res.set_content(
        controller::ClusterTop(nodes.List(), req.get_header_value("Authorization")).dump() + "\n",
        "application/json");
  });
  server.Delete(R"(/v1/functions/([a-z0-9-]+))",
                [&](const httplib::Request& req, httplib::Response& res) {
                  // Authorised against the function's (or FL job's) own namespace: a deployer
                  // deletes only its own.
                  const std::string name = req.matches[1].str();
                  std::string ns = "default";
                  bool function = false;
                  if (auto all = functions.List(); all.ok()) {
                    for (const auto& f : *all) {
                      if (f.name == name) {
                        ns = f.tenant;
                        function = true;
                      }
                    }
                  }
                  std::optional<controller::ClusterJob> job;
                  if (!function) {
                    if (auto j = fl_jobs.Get(name); j.ok()) {
                      ns = j->record.tenant;
                      job = *j;
                    }
                  }
                  if (!controller::Authorize(req, res, *tokens, auth::Action::kWrite, ns)) return;
                  Status st = function ? functions.Delete(name)
                              : job    ? fl_jobs.Delete(name)
                                       : NotFound("no function or FL job " + name);
                  if (!st.ok()) {
                    JsonError(res, HttpStatusFor(st.code()), st.message());
                    return;
                  }
                  res.set_content(json{{"deleted", name}}.dump() + "\n", "application/json");
                });
  controller::AddTokenRoutes(server, *tokens, cluster_tokens);
  controller::AddFlJobRoutes(server, *tokens, fl_jobs);
  server.Get("/v1/ui-info", [&](const httplib::Request& req, httplib::Response& res) {
    // What the web console asks first to show the cluster's pages (a node answers "shoald").
    if (!controller::Authenticate(req, res, *tokens)) return;
    res.set_content(
        json{{"server", "shoal-controller"}, {"version", "0.1.0"}, {"cluster", cluster_name}}
                .dump() +
            "\n",
        "application/json");
  });
  server.Get("/v1/cluster", [&](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, auth::Action::kReadNode)) return;
    res.set_content(json{{"cluster", cluster_name},
                         {"prefix", keys.prefix()},
                         {"controller", name},
                         {"leader", election.leader()},
                         {"is_leader", election.is_leader()},
                         {"nodes", nodes.size()}}
                            .dump() +
                        "\n",
                    "application/json");
  });
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {  // no route (a route's own 404 keeps its message)
      JsonError(res, 404,
                "shoal-controller serves /v1/nodes, /v1/cluster, /v1/functions, /v1/jobs, "
                "/v1/tokens, /v1/top, "
                "/v1/ui-info and the console at /ui/; no route " +
                    req.path);
    }
  });
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    spdlog::error("control API: cannot listen on {}:{}", host, port);
    return 1;
  }
  const std::string url = "http://" + host + ":" + std::to_string(bound);
  {
    // admin.conf (0600): the CLI config of the first admin; later starts refresh the address
    // and keep the token line.
    const std::string conf = state_dir + "/admin.conf";
    std::string token = first_admin_token;
    if (token.empty()) {
      std::ifstream in(conf);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("token: ", 0) == 0) token = line.substr(7);
      }
    }
    const std::string text =
        "server: " + url + "\n" + (token.empty() ? "" : "token: " + token + "\n");
    int fd = open(conf.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      spdlog::error("auth: cannot write {}: {}", conf, std::strerror(errno));
    }
    if (fd >= 0) close(fd);
    if (!first_admin_token.empty()) {
      std::fprintf(stderr,
                   "\nshoal-controller: created the first admin token (shown once, also saved in "
                   "%s, mode 0600):\n\n    %s\n\n",
                   conf.c_str(), first_admin_token.c_str());
    }
  }
  g_server.store(&server);
  auto on_signal = [](int) {
    if (auto* s = g_server.load()) s->stop();
  };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  spdlog::info("shoal-controller ready on {} ({} node(s); election on {})", url, nodes.size(),
               keys.Leader());
  server.listen_after_bind();
  spdlog::info("shoal-controller stopping (resigning if leader)");
  if (kube_operator) kube_operator->Stop();
  fl_jobs.StopMoving();
  functions.StopPlacing();
  return 0;
}
