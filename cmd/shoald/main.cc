// shoald: the node daemon. Composes the data plane (eBPF sk_msg or unix fallback), the
// tenants' shared-memory pools, the instance manager, the gateway and, with --standalone, the
// embedded controller (function registry, token store and the control API on its own
// listener).
#include <malloc.h>
#include <uv.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>

#include "shoal/common/command_line.h"
#include "shoal/common/config.h"
#include "shoal/common/file_io.h"
#include "shoal/common/log.h"
#include "shoal/control/autoscaler/signals.h"
#include "shoal/control/cluster/cluster_tokens.h"
#include "shoal/control/cluster/node_agent.h"
#include "shoal/control/node/commit_feed.h"
#include "shoal/control/node/control_api.h"
#include "shoal/control/node/manifest.h"
#include "shoal/control/node/registry.h"
#include "shoal/control/server/control_server.h"
#include "shoal/dataplane/channel/dataplane.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/federation/cluster_fl.h"
#include "shoal/fl/federation/managed_fl_jobs.h"
#include "shoal/fl/flower/fleet_service.h"
#include "shoal/fl/flower/gateway_updates.h"
#include "shoal/security/auth/token_store.h"
#include "shoal/security/detect/behaviour_monitor.h"
#ifdef SHOAL_HAVE_ONNX_EXPORT
#include "shoal/serving/export/model_onnx.h"
#endif
#include "shoal/runtime/node/instance_manager.h"
#include "shoal/runtime/node/node_capacity.h"
#include "shoal/runtime/sandbox/capabilities.h"

using namespace shoal;

namespace {

// The gateway's HttpService: the control API's FL client routes and Flower's Fleet API.
struct ControlService final : public HttpService {
  ControlService(ControlApi& a, flower::FleetService& f) : api(a), fleet(f) {}
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view query,
                   std::string_view body, const auth::Principal& who,
                   const ServiceHeaders& headers) override {
    if (flower::FleetService::Matches(path)) {
      return fleet.Handle(
          method, path, body,
          {headers.flwr_public_key, headers.flwr_signature, headers.flwr_timestamp});
    }
    return api.Handle(method, path, query, body, who);
  }
  ControlApi& api;
  flower::FleetService& fleet;
};

// <state>/admin.conf: the CLI config of the first admin (server, gateway, token), mode 0600,
// like kubeadm's admin.conf. Written with the token when shoald creates it; on later starts
// only the addresses are refreshed (ports may change), the token line is kept.
Status WriteAdminConf(const std::string& path, const std::string& server,
                      const std::string& gateway, const std::string& new_token) {
  std::string token = new_token;
  if (token.empty()) {
    std::ifstream in(path);
    if (!in) return Status::Ok();  // the admin deleted it: nothing to refresh
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("token: ", 0) == 0) token = line.substr(7);
    }
    if (token.empty()) return Status::Ok();
  }
  std::ostringstream text;
  text << "# Shoal CLI config of the first admin token (created by shoald). Keep it secret.\n"
       << "# Use it with: export SHOAL_CONFIG=" << path << "\n"
       << "server: " << server << "\n"
       << "gateway: " << gateway << "\n"
       << "token: " << token << "\n";
  return WriteFileAtomic(path, text.str(), 0600);
}

// Cluster mode: the gateway forwards by the node agent's routes once the node has joined
// (the agent starts after the gateway; until then, and in standalone mode, nothing forwards).
class AgentRoutes final : public shoal::ForwardTable {
 public:
  AgentRoutes(std::atomic<shoal::cluster::NodeAgent*>& agent, std::string self)
      : agent_(agent), self_(std::move(self)) {}
  bool Pick(Kind kind, std::string_view name, shoal::ForwardTarget* out) override {
    shoal::cluster::NodeAgent* agent = agent_.load();
    return agent != nullptr && agent->routes().Pick(kind, name, out);
  }
  const std::string& self() const override { return self_; }

 private:
  std::atomic<shoal::cluster::NodeAgent*>& agent_;
  const std::string self_;
};

}  // namespace

int main(int argc, char** argv) {
  // FL models are tens of MB and every commit allocates a few: keep such blocks in the heap
  // for reuse instead of glibc's mmap/munmap per allocation (a page fault per 4 KiB each time).
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{
      "shoald: the Shoal node daemon (gateway, shared-memory pools, eBPF data plane, "
      "instance manager)"};
  std::string config_path;
  bool standalone = false;
  bool print_config = false;
  std::optional<std::string> dataplane, instance_start;  // checked against the config's names
  // A flag that sets a config key: parsed into `flags`, put over the config file's value only
  // when given.
  NodeConfig flags;
  std::vector<std::function<void(NodeConfig&)>> apply_flags;
  auto config_flag = [&](const char* name, auto NodeConfig::*key, const char* help) {
    CLI::Option* o = app.add_option(name, flags.*key, help);
    apply_flags.push_back([o, key, &flags](NodeConfig& c) {
      if (o->count() > 0) c.*key = flags.*key;
    });
  };
  app.set_version_flag("--version", "shoald 0.1.0");
  app.add_option("-c,--config", config_path, "YAML config file (every key optional)");
  app.add_flag("--standalone", standalone, "run the controller embedded (single node)");
  config_flag("--etcd", &NodeConfig::etcd,
              "join a cluster: etcd client URLs, http://host:port[,...] (config etcd)");
  config_flag("--cluster", &NodeConfig::cluster, "the cluster's name in etcd (config cluster)");
  config_flag("--advertise", &NodeConfig::advertise_host,
              "the address other nodes reach this one at (config advertise_host)");
  app.add_flag("--print-config", print_config, "print the effective config and exit");
  config_flag("--port", &NodeConfig::listen_port, "listen port (config listen_port)");
  config_flag("--host", &NodeConfig::listen_host, "listen address (config listen_host)");
  config_flag("--control-port", &NodeConfig::control_port,
              "the control API's port, on control_listen_host (config control_port)");
  config_flag("--state-dir", &NodeConfig::state_dir, "deployments and logs (config state_dir)");
  config_flag("--node-name", &NodeConfig::node_name, "node name (config node_name)");
  app.add_option("--dataplane", dataplane, "auto, sockmap or unix (config dataplane)");
  app.add_option("--instance-start", instance_start,
                 "zygote (fork from the function's zygote) or spawn (config instance_start)");
  config_flag("--threads", &NodeConfig::gateway_threads, "gateway event loops, 0 = one per core");
  config_flag("--pool-bytes", &NodeConfig::pool_bytes, "shared-memory pool bytes per tenant");
  config_flag("--max-body-bytes", &NodeConfig::max_body_bytes, "request body limit");
  config_flag("--log-level", &NodeConfig::log_level, "trace, debug, info, warn, error");
  SetExamples(&app, {"shoald --standalone   # one node: gateway :8080, control API 127.0.0.1:8081",
                     "shoald --standalone --state-dir /tmp/shoal --port 9080 --control-port 9081",
                     "shoald -c /etc/shoal/node.yaml --etcd http://etcd-1:2379   # join a cluster",
                     "shoald -c /etc/shoal/node.yaml --print-config"});
  if (auto rc = ParseCommandLine(app, argc, argv)) return *rc;

  Result<NodeConfig> loaded =
      config_path.empty() ? NodeConfig{} : NodeConfig::LoadFile(config_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "shoald: %s\n", loaded.status().message().c_str());
    return 2;
  }
  NodeConfig config = *loaded;
  for (const auto& apply : apply_flags) apply(config);
  if (dataplane) {
    auto re = NodeConfig::LoadString("dataplane: " + *dataplane);
    if (!re.ok()) {
      std::fprintf(stderr, "shoald: --dataplane: must be auto, sockmap or unix\n");
      return 2;
    }
    config.dataplane = re->dataplane;
  }
  if (instance_start) {
    auto re = NodeConfig::LoadString("instance_start: " + *instance_start);
    if (!re.ok()) {
      std::fprintf(stderr, "shoald: --instance-start: %s\n", re.status().message().c_str());
      return 2;
    }
    config.instance_start = re->instance_start;
  }
  if (print_config) {
    std::cout << config.ToYaml();
    return 0;
  }
  if (standalone == !config.etcd.empty()) {
    std::fprintf(stderr, standalone ? "shoald: --standalone and --etcd (config etcd) exclude each "
                                      "other: one node alone, or a node of a cluster\n"
                                    : "shoald: run with --standalone (one node, the controller "
                                      "embedded) or --etcd URL (a node of a cluster)\n");
    return 2;
  }
  if (!config.etcd.empty()) {
    if (auto eps = cluster::ParseEndpoints(config.etcd); !eps.ok()) {
      std::fprintf(stderr, "shoald: --etcd: %s\n", eps.status().message().c_str());
      return 2;
    }
    if (Status st = cluster::ValidateNodeName(config.node_name); !st.ok()) {
      std::fprintf(stderr, "shoald: --node-name: %s (a cluster node's name is a DNS label)\n",
                   st.message().c_str());
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  InitLogging("shoald", config.log_level);
  spdlog::info(
      "shoald 0.1.0 starting: node '{}', state {}, pool {} MiB per tenant, body limit "
      "{} MiB",
      config.node_name, config.state_dir, config.pool_bytes >> 20, config.max_body_bytes >> 20);

  // The compromise detector's fanotify (detect_syscalls: sampled) marks the filesystems, which
  // needs CAP_SYS_ADMIN: done before that is dropped (reading its events needs no capability).
  Result<std::unique_ptr<OpenWatch>> open_watch = Unavailable("not used");
  const bool watch_opens = config.detect && config.detect_syscalls == DetectSyscalls::kSampled;
  if (watch_opens) open_watch = OpenWatch::Start();
  // Still one thread: capabilities are per thread, so the limit set here is every thread's.
  if (auto caps = LimitCapabilities(DaemonCapabilities(config.listen_port < 1024)); !caps.ok()) {
    spdlog::error("capabilities: {}", caps.status().ToString());
    return 1;
  } else if (caps->root) {
    std::string kept, dropped;
    for (const auto& c : caps->kept) kept += (kept.empty() ? "" : " ") + c;
    for (const auto& c : caps->dropped) dropped += (dropped.empty() ? "" : " ") + c;
    spdlog::info("capabilities: kept {}; dropped {}", kept, dropped);
  }

  auto dp = CreateDataPlane(config);
  if (!dp.ok()) {
    spdlog::error("data plane: {}", dp.status().ToString());
    return 1;
  }
  std::unique_ptr<DataPlane> data_plane = std::move(*dp);
  spdlog::info("data plane: {} ({})", DataPlaneKindName(data_plane->kind()),
               data_plane->Description());

  auto reg = FunctionRegistry::Open(config);
  if (!reg.ok()) {
    spdlog::error("registry: {}", reg.status().ToString());
    return 1;
  }
  std::unique_ptr<FunctionRegistry> registry = std::move(*reg);
  spdlog::info("registry: {} function(s) restored from {}", registry->List().size(),
               config.state_dir);

  auto token_store = auth::TokenStore::Open(config.state_dir + "/tokens.json");
  if (!token_store.ok()) {
    spdlog::error("auth: {}", token_store.status().ToString());
    return 1;
  }
  std::unique_ptr<auth::TokenStore> tokens = std::move(*token_store);
  // The first start creates the admin token. It is printed once, here, and kept only in
  // admin.conf (0600); the store holds its hash.
  std::string first_admin_token;
  if (!tokens->HasRole(auth::Role::kAdmin)) {
    auto created = tokens->Create({"admin", auth::Role::kAdmin, "", ""});
    if (!created.ok()) {
      spdlog::error("auth: cannot create the admin token: {}", created.status().ToString());
      return 1;
    }
    first_admin_token = created->token;
  }
  spdlog::info("auth: {} token(s) in {} (hashed); /v1 needs a bearer token", tokens->List().size(),
               tokens->path());

  // Before the coordinator: it publishes here from its commit thread until it is destroyed.
  CommitFeed commits;
  // Cluster mode: the controller's FL jobs that this node tops publish their state on commits.
  std::atomic<cluster::ManagedFlJobs*> managed_view{nullptr};
  // The serving instances that follow a job hear of its commits through the instance manager.
  std::atomic<InstanceManager*> commit_listeners{nullptr};
  FlCoordinator fl(config);
  fl.SetOnCommit(
      [&commits, &managed_view, &commit_listeners](const std::string& job, uint64_t version) {
        commits.Publish(job, version);
        if (InstanceManager* m = commit_listeners.load()) m->JobCommitted(job, version);
        if (cluster::ManagedFlJobs* m = managed_view.load()) m->Committed(job);
      });
  // An evaluation changes the status too (accuracy; the job done at its target): published as
  // a commit is.
  fl.SetOnStatus([&managed_view](const std::string& job) {
    if (cluster::ManagedFlJobs* m = managed_view.load()) m->Committed(job);
  });
  if (Status st = fl.Restore(); !st.ok()) {
    spdlog::error("fl coordinator: {}", st.ToString());
    return 1;
  }

  uv_loop_t* loop = uv_default_loop();
  NodeMetrics metrics;
  FunctionTable table;
  // The instance manager runs the registry's functions and the FL jobs' leaf aggregators.
  // Cluster mode: the cluster functions placed on this node run beside its own.
  std::atomic<cluster::NodeAgent*> cluster_view{nullptr};
  // The compromise detector (issue 18): watches the instances the manager reports ready.
  BehaviourMonitor monitor(config, loop);
  if (watch_opens) monitor.SetOpenWatch(std::move(open_watch));
  // Cluster mode: the cluster functions placed on this node, as this node runs them (its share
  // of their scale).
  auto placed_specs = [&cluster_view, &config] {
    std::vector<FunctionSpec> specs;
    cluster::NodeAgent* agent = cluster_view.load();
    if (agent == nullptr) return specs;
    for (const auto& placed : agent->Placed()) {
      auto parsed = ParseFunctionManifests(placed.function.manifest, config);
      if (!parsed.ok() || parsed->size() != 1) continue;
      FunctionSpec spec = std::move((*parsed)[0]);
      spec.id = placed.function.id;
      spec.generation = placed.function.generation;
      spec.min_scale = placed.placement.min_scale;
      spec.max_scale = placed.placement.max_scale;
      spec.created_unix_ms = placed.function.created_unix_ms;
      spec.updated_unix_ms = placed.function.updated_unix_ms;
      specs.push_back(std::move(spec));
    }
    return specs;
  };
  InstanceManager manager(config, loop, *data_plane, table, metrics,
                          [&registry, &fl, placed_specs] {
                            auto specs = registry->List();
                            for (auto& leaf : fl.LeafSpecs()) specs.push_back(std::move(leaf));
                            for (auto& spec : placed_specs()) specs.push_back(std::move(spec));
                            return specs;
                          });
  commit_listeners.store(&manager);
  // Before the manager goes (destroyed in reverse order): no commit reaches it after that.
  const std::unique_ptr<std::atomic<InstanceManager*>, void (*)(std::atomic<InstanceManager*>*)>
      stop_commit_listeners(&commit_listeners, [](auto* p) { p->store(nullptr); });
  fl.SetOnChange([&manager, &cluster_view] {
    manager.FunctionsChanged();
    // Cluster mode: the node's record lists its FL jobs, so other gateways forward theirs here.
    if (cluster::NodeAgent* agent = cluster_view.load()) agent->Refresh();
  });
  fl.SetOnGpuFallback([&metrics](const std::string& job) {
    metrics.fl_gpu_fallbacks.Add({{"job", job}}).Increment();
  });
  fl.SetOnSuspect([&metrics](const std::string& job, const std::string& client,
                             const std::string& rule) {
    metrics.fl_suspect_updates.Add({{"job", job}, {"client", client}, {"rule", rule}}).Increment();
  });
  ControlApi control(*registry, manager, &fl, tokens.get());
  control.SetClusterFunctions(placed_specs);
  std::atomic<uint16_t> gateway_port{0};  // set once the gateway listens
  flower::FleetService fleet(
      {&fl, [&fl](const std::string& job) { return fl.Spec(job); },
       flower::GatewayUpdatePoster(config.listen_host, gateway_port, tokens.get()),
       /*now=*/{}, /*wall_now=*/{}});
  ControlService control_service(control, fleet);
  const auto supernodes = [&fleet](std::string_view method, const std::string& job,
                                   std::string_view node_id, std::string_view body) {
    return fleet.Supernodes(method, job, node_id, body);
  };
  control.SetFlowerSupernodes(supernodes);
  // The control listener's API also converts a job's model to ONNX (?format=onnx): long work
  // for that listener's own threads, so the gateway's API (run on its loops) has no exporter.
  ControlApi listener_api(*registry, manager, &fl, tokens.get());
  listener_api.SetClusterFunctions(placed_specs);
  listener_api.SetFlowerSupernodes(supernodes);
#ifdef SHOAL_HAVE_ONNX_EXPORT
  listener_api.SetOnnxExport(inference::JobModelAsOnnx);
#endif
  // An inference instance reads its FL job's models through the fleet routes: it gets an
  // ephemeral fl-client token of that job (memory only, gone with this shoald).
  manager.SetInstanceToken([&tokens](const FunctionSpec& spec) -> std::string {
    auto it = spec.handler.env.find(kInferFlJobEnv);
    if (it == spec.handler.env.end() || !auth::ValidScopeName(it->second)) return {};
    auto t = tokens->Create({"instance:" + spec.name, auth::Role::kFlClient, "", it->second},
                            /*ephemeral=*/true);
    return t.ok() ? t->token : std::string();
  });
  // The cluster functions' autoscaling signals go to the leader (it decides their warm
  // instances over the whole cluster; this node still scales its share between min and max).
  manager.SetSignalSink([&cluster_view](const FunctionSpec& spec, const FunctionSignals& g) {
    cluster::NodeAgent* agent = cluster_view.load();
    if (agent == nullptr || spec.id < cluster::kClusterFunctionIdFirst ||
        spec.id > cluster::kClusterFunctionIdLast) {
      return;
    }
    cluster::NodeSignals s;
    s.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    s.interval_s = g.interval_s;
    s.inflight = g.inflight;
    s.queued = g.queued;
    s.ready = g.ready;
    s.starting = g.starting;
    s.busy = g.busy;
    s.idle = g.idle;
    s.arrivals = g.arrivals;
    s.completions = g.completions;
    s.cold_starts = g.cold_starts;
    s.mean_queue_wait_s = g.mean_queue_wait_s;
    s.mean_service_s = g.mean_service_s;
    s.p99_latency_s = g.p99_latency_s;
    s.cold_start_cost_s = g.cold_start_cost_s;
    s.tokens_in_flight = g.tokens_in_flight;
    s.running_sequences = g.running_sequences;
    s.queued_sequences = g.queued_sequences;
    agent->OfferSignals(spec.name, s);
  });
  GatewayHooks hooks;
  hooks.control = &control_service;
  hooks.tokens = tokens.get();
  std::unique_ptr<cluster::NodeAgent> node_agent;  // cluster mode: the node's etcd registration
  std::unique_ptr<cluster::ClusterFl> cluster_fl;  // cluster mode: FL across the nodes
  std::atomic<cluster::ClusterFl*> cluster_fl_view{nullptr};  // for /metrics, once started
  std::unique_ptr<cluster::ClusterTokens> cluster_tokens;     // cluster mode: the cluster's tokens
  std::unique_ptr<cluster::ManagedFlJobs> managed_jobs;       // cluster mode: the controller's jobs
  hooks.metrics_text = [&] {
    manager.RefreshMetrics();
    std::string text = metrics.Serialize();
    text += monitor.MetricsText();
    if (node_agent) text += node_agent->MetricsText();
    if (cluster::ClusterFl* c = cluster_fl_view.load()) text += c->MetricsText();
    text += fl.PrivacyMetricsText();
    return text;
  };
  // Ready only once the whole start-up is done: the gateway answers /readyz before the control
  // API listens, admin.conf is written and (cluster mode) the node has joined, and a readiness
  // probe or a script that reads admin.conf on the first 200 must find all of them there.
  std::atomic<bool> started{false};
  hooks.ready = [&] { return started.load() && manager.Ready(); };
  // Cluster mode: /readyz says how the node's etcd link stands. It stays 200 while etcd is
  // away: the data plane keeps serving what is placed here and forwarding by the last routes.
  hooks.ready_detail = [&cluster_view, &started]() -> std::string {
    if (!started.load()) return "starting: control API and cluster membership not up yet\n";
    cluster::NodeAgent* agent = cluster_view.load();
    return agent ? agent->StatusLine() + "\n" : std::string();
  };
  hooks.fl = &fl;
  AgentRoutes forward_routes(cluster_view, config.node_name);
  if (!config.etcd.empty()) hooks.forward = &forward_routes;
  Gateway gateway(config, table, *data_plane, manager, metrics, std::move(hooks));

  manager.SetObserver(&monitor);
  if (Status st = manager.Start(&gateway); !st.ok()) {
    spdlog::error("instance manager: {}", st.ToString());
    return 1;
  }
  monitor.Start(manager.CgroupVersion(), [&manager](uint32_t key, const std::string& reason) {
    return manager.Quarantine(key, reason);
  });
  // Before the gateway takes updates: re-fold the acknowledged updates a killed shoald left in
  // the jobs' pools (fl.Restore read their log).
  if (Status st =
          fl.Recover([&manager](const std::string& tenant) { return manager.TenantPool(tenant); });
      !st.ok()) {
    spdlog::error("fl coordinator: {}", st.ToString());
    manager.Stop();
    return 1;
  }
  if (Status st = gateway.Start(); !st.ok()) {
    spdlog::error("gateway: {}", st.ToString());
    manager.Stop();
    return 1;
  }

  // Instances (and the control listener, for the console's model stats) reach the gateway on
  // loopback unless it listens on one address only.
  gateway_port = gateway.port();
  const std::string gateway_url = [&] {
    const std::string& host = config.listen_host;
    const bool any = host.empty() || host == "0.0.0.0" || host == "::";
    return "http://" + std::string(any ? "127.0.0.1" : host) + ":" + std::to_string(gateway.port());
  }();
  manager.SetGatewayUrl(gateway_url);
  ControlServer control_server(config, listener_api, *tokens);
  control_server.SetGatewayUrl(gateway_url);
  control_server.SetCommitFeed(&commits);
  if (Status st = control_server.Start(); !st.ok()) {
    spdlog::error("control API: {}", st.ToString());
    gateway.Stop();
    manager.Stop();
    return 1;
  }
  {
    const std::string conf = config.state_dir + "/admin.conf";
    if (Status st = WriteAdminConf(conf, control_server.url(), gateway_url, first_admin_token);
        !st.ok()) {
      spdlog::error("auth: {}", st.ToString());
    }
    if (!first_admin_token.empty()) {
      // Printed this once: the store keeps only its hash.
      std::fprintf(stderr,
                   "\nshoald: created the first admin token (shown once, also saved in %s, mode "
                   "0600):\n\n    %s\n\nUse it with: export SHOAL_CONFIG=%s   (or "
                   "SHOAL_TOKEN=<token>)\n\n",
                   conf.c_str(), first_admin_token.c_str(), conf.c_str());
      first_admin_token.assign(first_admin_token.size(), '\0');
    }
  }
  if (!config.etcd.empty()) {
    cluster::NodeRecord record;
    record.name = config.node_name;
    record.address = cluster::AdvertiseHost(config) + ":" + std::to_string(gateway.port());
    record.control = control_server.url();  // the cluster console links each node's own
    record.version = "0.1.0";
    const Resources capacity = ProbeNodeCapacity();
    record.cores = static_cast<uint32_t>(capacity.cores);
    record.memory_mib = static_cast<uint64_t>(capacity.memory_mb);
    record.gpus = capacity.gpus;
    record.started_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    for (const auto& spec : registry->List()) record.cached_functions.push_back(spec.name);
    auto agent = cluster::NodeAgent::Start(
        config, record, [&manager] { manager.FunctionsChanged(); },
        [&config](const cluster::ClusterFunction& f) -> std::string {
          auto parsed = ParseFunctionManifests(f.manifest, config);
          return parsed.ok() && parsed->size() == 1 ? InferenceModelName((*parsed)[0]) : "";
        });
    if (!agent.ok()) {
      spdlog::error("cluster: {}", agent.status().ToString());
      control_server.Stop();
      gateway.Stop();
      manager.Stop();
      return 1;
    }
    node_agent = std::move(*agent);
    // What placement reads about this node, kept current: its FL jobs, the functions it holds
    // warm (an instance ready) or has the code of (its own registry's), and the cold start its
    // functions measured here (the median of their latest).
    node_agent->SetRecordSource([&fl, &registry, &manager, &node_agent](cluster::NodeRecord* r) {
      r->fl_jobs = fl.ListJobs();
      std::vector<std::string> names;
      for (const auto& spec : registry->List()) names.push_back(spec.name);
      for (const auto& placed : node_agent->Placed()) names.push_back(placed.function.name);
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      std::vector<std::string> cached;
      std::vector<double> cold_ms;
      for (const auto& name : names) {
        const FunctionStats st = manager.Stats(name);
        if (st.ready > 0 || registry->Get(name)) cached.push_back(name);
        if (st.cold_starts > 0 && st.last_cold_start_ms > 0)
          cold_ms.push_back(st.last_cold_start_ms);
      }
      r->cached_functions = std::move(cached);
      if (!cold_ms.empty()) {
        std::nth_element(cold_ms.begin(), cold_ms.begin() + cold_ms.size() / 2, cold_ms.end());
        r->cold_start_ms = std::round(cold_ms[cold_ms.size() / 2] * 10) / 10;
      }
    });
    cluster_view.store(node_agent.get());
    // LIFL's hierarchy across nodes: this node folds the updates it receives for jobs whose top
    // is elsewhere, and tops the jobs it runs for the other nodes.
    // The cluster's tokens (issued by the controllers) are accepted here beside this node's own.
    cluster_tokens = std::make_unique<cluster::ClusterTokens>(&node_agent->etcd(),
                                                              node_agent->keys(), tokens.get());
    // The FL jobs deployed through the controller: this node runs those it is the top of.
    managed_jobs = std::make_unique<cluster::ManagedFlJobs>(
        config.node_name, fl, &node_agent->etcd(), node_agent->keys(),
        [](const std::string& manifest) -> Result<FlJobSpec> {
          auto specs = ParseFlJobManifests(manifest);
          if (!specs.ok()) return specs.status();
          if (specs->size() != 1) return InvalidArgument("want one FLJob document");
          return std::move((*specs)[0]);
        });
    cluster_fl = std::make_unique<cluster::ClusterFl>(config, fl, *tokens, *node_agent);
    cluster_fl->SetManaged(
        [m = managed_jobs.get()](const std::string& job) { return m->Manages(job); });
    Status cluster_st = cluster_tokens->Start();
    if (cluster_st.ok()) cluster_st = managed_jobs->Start();
    if (cluster_st.ok()) {
      managed_view.store(managed_jobs.get());
      spdlog::info(
          "cluster: the cluster's tokens accepted here; FL jobs deployed through the "
          "controller run on the node it names as their top");
    }
    if (Status st = cluster_st.ok() ? cluster_fl->Start() : cluster_st; !st.ok()) {
      spdlog::error("cluster: {}", st.ToString());
      node_agent->Leave();
      control_server.Stop();
      gateway.Stop();
      manager.Stop();
      return 1;
    }
    cluster_fl_view.store(cluster_fl.get());
    spdlog::info("cluster: node {} of cluster '{}' at {} (etcd {}; lease TTL {} s)",
                 config.node_name, config.cluster, record.address, config.etcd,
                 config.node_lease_ttl_s);
  }
  uv_signal_t sigint, sigterm;
  auto on_signal = [](uv_signal_t* s, int signum) {
    spdlog::info("signal {}: shutting down", signum);
    uv_stop(s->loop);
  };
  uv_signal_init(loop, &sigint);
  uv_signal_init(loop, &sigterm);
  uv_signal_start(&sigint, on_signal, SIGINT);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  started.store(true);
  spdlog::info("shoald ready on http://{}:{} (data plane {}; control API {})", config.listen_host,
               gateway.port(), DataPlaneKindName(data_plane->kind()), control_server.url());

  uv_run(loop, UV_RUN_DEFAULT);

  if (node_agent) node_agent->Leave();  // first: the others stop routing here at once
  control_server.Stop();
  gateway.Stop();
  manager.Stop();
  monitor.Stop();
  managed_view.store(nullptr);
  if (managed_jobs) managed_jobs->Stop();  // before the coordinator it runs jobs on
  cluster_fl_view.store(nullptr);
  if (cluster_fl) cluster_fl->Stop();  // before the agent it reads and the coordinator it calls
  cluster_fl.reset();
  managed_jobs.reset();
  cluster_tokens.reset();
  cluster_view.store(nullptr);
  node_agent.reset();
  uv_close(reinterpret_cast<uv_handle_t*>(&sigint), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sigterm), nullptr);
  uv_run(loop, UV_RUN_NOWAIT);
  data_plane.reset();  // detaches the program and removes the pins
  spdlog::info("shoald stopped");
  return 0;
}
