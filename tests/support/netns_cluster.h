// A real Shoal cluster on one machine for tests and benchmarks: N network namespaces joined by
// veth pairs to a bridge, one shoald per namespace on its own address (10.77.K.i:8080), a real
// etcd on the bridge's address and shoal-controllers in the root namespace. Each shoald runs as
// deploy/k8s's rendered DaemonSet runs it (k8s_pod.h: its command, args, env and ConfigMap
// config, its volumes in the node's directory); what the tests change is listed, with its
// reason, in StartNode. Everything is torn down by the destructor (processes, links,
// namespaces, BPF pins, directories), also when a test fails.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "etcd_for_test.h"
#include "k8s_pod.h"
#include "shoald_fixture.h"

namespace shoal::testing {

// What this machine lacks for a TestCluster (namespaces, a bridge, etcd, and kubectl to render
// the DaemonSet the nodes run as), or "": the reason to skip.
std::string NetnsMissing();

class TestCluster {
 public:
  struct Options {
    int nodes = 3;
    int controllers = 1;
    int etcd_members = 1;
    uint32_t node_lease_ttl_s = 3;
    double forward_timeout_s = 0;  // 0: shoald's default
    int controller_lease_ttl_s = 2;
    uint64_t pool_bytes = 64ull << 20;
    bool fl_hierarchy = true;  // false: FL updates go whole to their job's top (central layout)
    // The nodes' checkpoint_dir: one directory they all share (the ReadWriteMany volume of a
    // Kubernetes install), so a node can take a lost top's FL jobs over.
    bool shared_checkpoints = false;
  };
  explicit TestCluster(Options options);
  ~TestCluster();
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  // Renders deploy/k8s, makes the network, starts etcd, the controllers and every node, and
  // waits until each node answers /readyz; false with `why` set otherwise.
  bool Start(std::string* why);

  int nodes() const { return options_.nodes; }
  std::string node_name(int i) const;
  std::string node_ip(int i) const;
  // The network namespace node i runs in (its name under /var/run/netns).
  std::string netns(int i) const { return ns(i); }
  // Node i's veth in the root namespace (its rx counts what node i sends, its tx what it gets).
  std::string host_veth(int i) const { return veth(i); }
  // The DaemonSet's ports (its config's listen_port and control_port; StartNode fails naming
  // them if the manifests change them).
  static constexpr uint16_t kGatewayPort = 8080;
  static constexpr uint16_t kControlPort = 8081;
  // The cluster's name: the rendered ConfigMap shoal-cluster's, for nodes and controllers.
  const std::string& cluster_name() const { return cluster_; }
  // The node's control API (admin token of that node).
  HttpResult NodeApi(int i, const std::string& method, const std::string& path,
                     const std::string& body = {});
  const std::string& node_token(int i) const { return nodes_[static_cast<size_t>(i)].token; }
  HttpResult NodeGateway(int i, const std::string& method, const std::string& path,
                         const std::string& body = {});
  // Starts (again) node i's shoald, with `name` instead of its own when given; false if it
  // exits or does not become ready (its log says why).
  bool StartNode(int i, const std::string& name = {});
  // Signals node i's shoald and waits for it to exit; its exit status.
  int StopNode(int i, int sig);
  bool NodeRunning(int i);
  std::string NodeLog(int i) const;
  // Cuts (or restores) node i's link to the bridge.
  void SetLink(int i, bool up);

  int controllers() const { return options_.controllers; }
  uint16_t controller_port(int j) const;
  HttpResult ControllerApi(int j, const std::string& method, const std::string& path);
  bool StartController(int j);
  int StopController(int j, int sig);
  std::string ControllerLog(int j) const;
  const std::string& controller_token() const { return controller_token_; }

  EtcdForTest& etcd() { return *etcd_; }
  std::string etcd_endpoints() const { return etcd_->endpoints(); }

 private:
  struct Proc {
    pid_t pid = -1;
    std::string log;
    std::string dir;
    uint16_t port = 0;
    std::string token;
  };
  bool Sh(const std::string& cmd, std::string* why = nullptr);
  std::string ns(int i) const;
  std::string veth(int i) const;
  std::string bpffs() const { return "/sys/fs/bpf/shoal-it-" + tag_; }
  Options options_;
  std::vector<YAML::Node> manifests_;  // deploy/k8s, rendered
  std::string cluster_;
  std::string tag_;
  int subnet_ = 0;
  std::string dir_;
  std::string bridge_;
  bool network_made_ = false;
  std::unique_ptr<EtcdForTest> etcd_;
  std::vector<Proc> nodes_;
  std::vector<Proc> controllers_;
  std::string controller_token_;
};

}  // namespace shoal::testing
