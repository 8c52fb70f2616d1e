#include "tests/support/netns_cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "shoal/common/file_io.h"
#include "tests/support/temp_dir.h"

namespace shoal::testing {
namespace {

std::string Slurp(const std::string& path) { return ReadFileBytes(path).value_or(""); }

// fork + (setns into `netns`) + exec with `env` added, output appended to `log`.
pid_t Launch(const std::vector<std::string>& args, const std::string& log, const std::string& netns,
             const std::map<std::string, std::string>& env = {}) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  if (!netns.empty()) {
    int nfd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) {
      perror("setns");
      _exit(126);
    }
  }
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

void AppendLog(const std::string& log, const std::string& text) {
  std::ofstream(log, std::ios::app) << text << "\n";
}

// Every absolute path among the config's values, mapped onto the pod's volumes; a path on no
// volume is a manifest error (the config would write into the image's read-only root).
void MapConfigPaths(YAML::Node node, const k8s::PodOnHost& pod, std::vector<std::string>* bad) {
  if (node.IsMap()) {
    for (auto kv : node) {
      if (kv.second.IsScalar()) {
        const std::string v = kv.second.as<std::string>();
        if (v.empty() || v[0] != '/') continue;
        if (pod.MountOf(v).empty()) {
          bad->push_back(kv.first.as<std::string>() + ": " + v + " lies on no volume");
        } else {
          kv.second = pod.MapPath(v);
        }
      } else {
        MapConfigPaths(kv.second, pod, bad);
      }
    }
  } else if (node.IsSequence()) {
    for (auto item : node) MapConfigPaths(item, pod, bad);
  }
}

// Polls (every 20 ms, 10 s at most) the log at `path` past `offset` until it matches `ready`
// and holds `also`; false once `*pid` exits (then -1) or the time is up. `m` holds the match
// within `*log`.
bool AwaitReady(pid_t* pid, const std::string& path, size_t offset, const std::regex& ready,
                const std::string& also, std::string* log, std::smatch* m) {
  for (int t = 0; t < 500; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int status;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      return false;
    }
    *log = Slurp(path).substr(offset);
    if (log->find(also) != std::string::npos && std::regex_search(*log, *m, ready)) return true;
  }
  return false;
}

// The admin token a shoald or shoal-controller wrote to its state dir's admin.conf.
std::string AdminToken(const std::string& state) {
  std::istringstream conf(Slurp(state + "/admin.conf"));
  std::string token;
  for (std::string line; std::getline(conf, line);) {
    if (line.rfind("token: ", 0) == 0) token = line.substr(7);
  }
  return token;
}

int Reap(pid_t pid, int sig) {
  if (pid <= 0) return -1;
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::string NetnsMissing() {
  if (!IsRoot()) return "network namespaces need root";
  if (system("command -v ip >/dev/null 2>&1") != 0) return "no `ip` (Debian package iproute2)";
  const std::string probe = "shoal-probe-" + std::to_string(getpid());
  if (system(("ip netns add " + probe + " >/dev/null 2>&1").c_str()) != 0) {
    return "`ip netns add` fails here (no CAP_SYS_ADMIN or no netns support)";
  }
  (void)system(("ip netns del " + probe + " >/dev/null 2>&1").c_str());
  // Per process: tests of this suite run side by side.
  const std::string bridge = "shpb" + std::to_string(getpid());
  if (system(("ip link add " + bridge + " type bridge >/dev/null 2>&1").c_str()) != 0) {
    return "cannot create a bridge (no bridge support in this kernel)";
  }
  (void)system(("ip link del " + bridge + " >/dev/null 2>&1").c_str());
  // The nodes run as the rendered DaemonSet runs shoald: without kubectl there is nothing to
  // start them from. A hand-written fallback config would be the drift this helper removes.
  if (auto why = k8s::KubectlMissing(); !why.empty()) {
    return why + ": the cluster's nodes start from deploy/k8s's rendered DaemonSet";
  }
  return EtcdMissing();
}

TestCluster::TestCluster(Options options) : options_(options) {
  tag_ = std::to_string(getpid());
  subnet_ = 20 + static_cast<int>(getpid() % 200);
  bridge_ = "shb" + tag_;
  dir_ = MakeTempDir("shoal-cluster");
  nodes_.resize(static_cast<size_t>(options_.nodes));
  controllers_.resize(static_cast<size_t>(options_.controllers));
}

TestCluster::~TestCluster() {
  for (auto& c : controllers_) Reap(c.pid, SIGKILL);
  for (auto& n : nodes_) Reap(n.pid, SIGKILL);
  etcd_.reset();
  if (network_made_) {
    for (int i = 0; i < options_.nodes; ++i) {
      Sh("ip link del " + veth(i) + " 2>/dev/null");
      Sh("ip netns del " + ns(i) + " 2>/dev/null");
    }
    Sh("ip link del " + bridge_ + " 2>/dev/null");
  }
  std::error_code ec;
  std::filesystem::remove_all(bpffs(), ec);
  std::filesystem::remove_all(dir_, ec);
  // The nodes' shared-memory pools outlive a killed shoald by design (a restarted node takes
  // them over); nothing restarts these: each is gone with the cluster (a benchmark's are GBs).
  for (int i = 0; i < options_.nodes; ++i) {
    const std::string prefix = "shoal." + node_name(i) + ".";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
    }
  }
}

bool TestCluster::Sh(const std::string& cmd, std::string* why) {
  const int rc = system(cmd.c_str());
  if (rc != 0 && why != nullptr) *why = "`" + cmd + "` failed (" + std::to_string(rc) + ")";
  return rc == 0;
}

std::string TestCluster::ns(int i) const { return "shoal-" + tag_ + "-n" + std::to_string(i); }
std::string TestCluster::veth(int i) const { return "sv" + tag_ + "n" + std::to_string(i); }
std::string TestCluster::node_name(int i) const { return "n" + std::to_string(i) + "-" + tag_; }
std::string TestCluster::node_ip(int i) const {
  return "10.77." + std::to_string(subnet_) + "." + std::to_string(i + 1);
}

bool TestCluster::Start(std::string* why) {
  manifests_ = k8s::Render("", why);
  if (manifests_.empty()) return false;
  const YAML::Node ds = k8s::Find(manifests_, "DaemonSet", "shoald");
  if (!ds || !k8s::NamedItem(k8s::PodSpec(ds)["containers"], "shoald")) {
    *why = "deploy/k8s renders no DaemonSet shoald with a container shoald";
    return false;
  }
  const YAML::Node names = k8s::FindGenerated(manifests_, "ConfigMap", "shoal-cluster");
  cluster_ = names["data"]["cluster"].as<std::string>("");
  if (cluster_.empty()) {
    *why = "deploy/k8s renders no ConfigMap shoal-cluster with a key cluster";
    return false;
  }
  network_made_ = true;
  {
    // Clusters of tests running side by side each take a /24 no interface has yet: chosen and
    // claimed (the bridge's address) under one machine-wide lock.
    int lock = open("/tmp/shoal-netns-cluster.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock >= 0) flock(lock, LOCK_EX);
    for (int k = 0; k < 200; ++k) {
      const int candidate = 20 + static_cast<int>((getpid() + k) % 200);
      const std::string probe =
          "ip -4 -o addr show to 10.77." + std::to_string(candidate) + ".0/24 | grep -q .";
      if (system(probe.c_str()) != 0) {
        subnet_ = candidate;
        break;
      }
    }
    const std::string bridge_ip = "10.77." + std::to_string(subnet_) + ".254";
    const bool made = Sh("ip link add " + bridge_ + " type bridge", why) &&
                      Sh("ip addr add " + bridge_ip + "/24 dev " + bridge_, why) &&
                      Sh("ip link set " + bridge_ + " up", why);
    if (lock >= 0) close(lock);
    if (!made) return false;
  }
  const std::string net = "10.77." + std::to_string(subnet_);
  const std::string bridge_ip = net + ".254";
  for (int i = 0; i < options_.nodes; ++i) {
    const std::string n = ns(i), v = veth(i), peer = v + "p";
    if (!Sh("ip netns add " + n, why) ||
        !Sh("ip link add " + v + " type veth peer name " + peer, why) ||
        !Sh("ip link set " + peer + " netns " + n, why) ||
        !Sh("ip netns exec " + n + " ip link set " + peer + " name eth0", why) ||
        !Sh("ip netns exec " + n + " ip addr add " + node_ip(i) + "/24 dev eth0", why) ||
        !Sh("ip netns exec " + n + " ip link set eth0 up", why) ||
        !Sh("ip netns exec " + n + " ip link set lo up", why) ||
        !Sh("ip link set " + v + " master " + bridge_, why) ||
        !Sh("ip link set " + v + " up", why)) {
      return false;
    }
  }
  etcd_ = std::make_unique<EtcdForTest>(options_.etcd_members, bridge_ip);
  if (!etcd_->Start()) {
    *why = "etcd did not start: " + etcd_->Log(0).substr(0, 2000);
    return false;
  }
  for (int j = 0; j < options_.controllers; ++j) {
    if (!StartController(j)) {
      *why = "shoal-controller " + std::to_string(j) + " did not start:\n" + ControllerLog(j);
      return false;
    }
  }
  for (int i = 0; i < options_.nodes; ++i) {
    if (!StartNode(i)) {
      *why = "shoald on " + node_name(i) + " did not start:\n" + NodeLog(i);
      return false;
    }
  }
  return true;
}

bool TestCluster::StartNode(int i, const std::string& name) {
  Proc& p = nodes_[static_cast<size_t>(i)];
  if (p.dir.empty()) {
    p.dir = dir_ + "/node" + std::to_string(i);
    std::filesystem::create_directories(p.dir);
    p.log = p.dir + "/shoald.log";
  }
  // shoald as the DaemonSet runs it: its command and args, its env (the downward API's node
  // name and host IP: this node's; ConfigMap shoal-cluster's etcd: replaced by the test's
  // etcd, the Service name resolves nowhere here), the node ConfigMap as its config file and
  // its volumes below the node's directory (bpffs: a directory of this machine's bpffs).
  const YAML::Node spec = k8s::PodSpec(k8s::Find(manifests_, "DaemonSet", "shoald"));
  const k8s::PodOnHost pod(
      manifests_, spec, k8s::NamedItem(spec["containers"], "shoald"), p.dir,
      {{"spec.nodeName", name.empty() ? node_name(i) : name}, {"status.hostIP", node_ip(i)}},
      {{"SHOAL_ETCD", etcd_->endpoints()}}, {}, bpffs() + "/n" + std::to_string(i));
  std::vector<std::string> problems = pod.problems();
  const std::string cfg = pod.MapPath(pod.Flag("--config"));
  YAML::Node config;
  try {
    config = YAML::LoadFile(cfg);
  } catch (const YAML::Exception& e) {
    problems.push_back("the DaemonSet's --config " + cfg + ": " + e.what());
  }
  MapConfigPaths(config, pod, &problems);
  if (config["listen_port"].as<int>(0) != kGatewayPort ||
      config["control_port"].as<int>(0) != kControlPort) {
    problems.push_back("the node config's listen_port/control_port are not " +
                       std::to_string(kGatewayPort) + "/" + std::to_string(kControlPort) +
                       " (TestCluster::kGatewayPort/kControlPort)");
  }
  // What the tests change in the node config, and why. Everything else is the DaemonSet's.
  //  - The tests call each node's control API from the root namespace (NodeApi); in a pod it
  //    stays on the node's loopback. Off loopback shoald wants TLS or control_allow_insecure.
  config["control_listen_host"] = node_ip(i);
  config["control_allow_insecure"] = true;
  //  - Several nodes share this machine (two cores in CI), its /dev/shm and its hugepages: one
  //    gateway loop each, the boost pool (dpdk would take hugepages other tests reserve), the
  //    test's pool size, and bodies that fit that pool.
  config["gateway_threads"] = 1;
  config["pool"] = "boost";
  config["pool_bytes"] = options_.pool_bytes;
  config["max_body_bytes"] = options_.pool_bytes / 4;
  //  - The tests lose nodes and wait for their leases to expire (the DaemonSet's TTL is 10 s).
  config["node_lease_ttl_s"] = options_.node_lease_ttl_s;
  if (options_.forward_timeout_s > 0) config["forward_timeout_s"] = options_.forward_timeout_s;
  //  - bench-cluster-round compares LIFL's hierarchy with the central layout.
  if (!options_.fl_hierarchy) config["fl_hierarchy"] = false;
  if (options_.shared_checkpoints) config["checkpoint_dir"] = dir_ + "/checkpoints";
  {
    YAML::Emitter out;
    out << config;
    std::ofstream(cfg) << out.c_str() << "\n";
  }
  if (!problems.empty()) {
    for (const auto& why : problems) AppendLog(p.log, "netns_cluster: " + why);
    return false;
  }
  const std::string state = config["state_dir"].as<std::string>();
  const size_t offset = Slurp(p.log).size();
  p.pid = Launch(pod.Argv(), p.log, ns(i), pod.env());
  std::string log;
  std::smatch m;
  if (!AwaitReady(&p.pid, p.log, offset, std::regex("shoald ready on http://"), "cluster: node ",
                  &log, &m)) {
    return false;
  }
  p.token = AdminToken(state);
  return HttpAt(node_ip(i), kGatewayPort, "GET", "/readyz", {}, {}, 0, 2000).status == 200;
}

int TestCluster::StopNode(int i, int sig) {
  Proc& p = nodes_[static_cast<size_t>(i)];
  const int rc = Reap(p.pid, sig);
  p.pid = -1;
  return rc;
}

bool TestCluster::NodeRunning(int i) {
  Proc& p = nodes_[static_cast<size_t>(i)];
  if (p.pid <= 0) return false;
  int status;
  if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
    p.pid = -1;
    return false;
  }
  return true;
}

std::string TestCluster::NodeLog(int i) const { return Slurp(nodes_[static_cast<size_t>(i)].log); }

HttpResult TestCluster::NodeApi(int i, const std::string& method, const std::string& path,
                                const std::string& body) {
  return HttpAt(node_ip(i), kControlPort, method, path, body,
                {"Authorization: Bearer " + nodes_[static_cast<size_t>(i)].token,
                 "Content-Type: application/yaml"},
                0, 10000);
}

HttpResult TestCluster::NodeGateway(int i, const std::string& method, const std::string& path,
                                    const std::string& body) {
  return HttpAt(node_ip(i), kGatewayPort, method, path, body, {}, 0, 10000);
}

void TestCluster::SetLink(int i, bool up) { Sh("ip link set " + veth(i) + (up ? " up" : " down")); }

bool TestCluster::StartController(int j) {
  Proc& p = controllers_[static_cast<size_t>(j)];
  if (p.dir.empty()) {
    p.dir = dir_ + "/controller" + std::to_string(j);
    std::filesystem::create_directories(p.dir);
    p.log = p.dir + "/controller.log";
  }
  // The controllers share one state dir (one token store), as replicas sharing a Secret would.
  const std::string state = dir_ + "/controller-state";
  const size_t offset = Slurp(p.log).size();
  p.pid =
      Launch({BinDir() + "/shoal-controller", "--etcd", etcd_->endpoints(), "--cluster", cluster_,
              "--port", "0", "--state-dir", state, "--name", "ctl-" + std::to_string(j),
              "--lease-ttl", std::to_string(options_.controller_lease_ttl_s)},
             p.log, "");
  std::string log;
  std::smatch m;
  if (!AwaitReady(&p.pid, p.log, offset,
                  std::regex("shoal-controller ready on http://127.0.0.1:([0-9]+)"), "", &log,
                  &m)) {
    return false;
  }
  p.port = static_cast<uint16_t>(std::stoi(m[1]));
  controller_token_ = AdminToken(state);
  return true;
}

int TestCluster::StopController(int j, int sig) {
  Proc& p = controllers_[static_cast<size_t>(j)];
  const int rc = Reap(p.pid, sig);
  p.pid = -1;
  return rc;
}

uint16_t TestCluster::controller_port(int j) const {
  return controllers_[static_cast<size_t>(j)].port;
}

std::string TestCluster::ControllerLog(int j) const {
  return Slurp(controllers_[static_cast<size_t>(j)].log);
}

HttpResult TestCluster::ControllerApi(int j, const std::string& method, const std::string& path) {
  return Http(controller_port(j), method, path, {}, {"Authorization: Bearer " + controller_token_},
              0, 10000);
}

}  // namespace shoal::testing
