// deploy/k8s against the real binaries: everything is read from the YAML that `kubectl
// kustomize` renders (the base and every overlay), nothing is copied into this test. Rendering
// and placing a pod on this machine is tests/support/k8s_pod.h's (the netns cluster's nodes run
// from the same DaemonSet through it).
//  - every shoald container's command and args (with $(VAR) expanded from its env, as the
//    kubelet does) are accepted by shoald (--print-config: parsed, config loaded, printed);
//  - a live etcd (EtcdForTest), the shoal-controller started from the Deployment (its init
//    container seeding the token store from scripts/k8s-admin-secret's Secret), shoald started
//    from the DaemonSet, and the examples Job run against them: every probe answers 200 on the
//    port the binary listens on, the node registers under its downward-API name, the Job's
//    `shoal deploy` reaches the controller through the Service's name and port;
//  - mounts: the config's state_dir and bpf_pin_root lie on the volumes meant for them;
//  - capabilities: shoald started with exactly the DaemonSet's set (capsh) loads the sockmap
//    data plane, and without CAP_BPF, CAP_NET_ADMIN or CAP_PERFMON it does not; the set is
//    what shoald keeps for itself;
//  - etcd's StatefulSet: its flags are etcd's, its members, peers and Services agree, and the
//    dev overlay's member started from it answers both probes.
// Paths are mapped onto temporary directories and ports onto free ones (other Shoal processes
// may hold 8080 on this machine); each mapping is asserted equal to the manifest's first.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/file_io.h"
#include "shoal/dataplane/pool/hugepages.h"
#include "tests/support/bpf_capability.h"
#include "tests/support/etcd_for_test.h"
#include "tests/support/k8s_pod.h"
#include "tests/support/shoald_fixture.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text_checks.h"

namespace {

namespace fs = std::filesystem;
using shoal::testing::BinDir;
using shoal::testing::Contains;
using shoal::testing::FreePort;
using shoal::testing::Http;
using shoal::testing::HttpResult;
using shoal::testing::k8s::Base64Decode;
using shoal::testing::k8s::Capture;
using shoal::testing::k8s::Find;
using shoal::testing::k8s::FindGenerated;
using shoal::testing::k8s::KubectlMissing;
using shoal::testing::k8s::NamedItem;
using shoal::testing::k8s::PodOnHost;
using shoal::testing::k8s::PodSpec;
using shoal::testing::k8s::Strings;

std::string ReadFile(const std::string& path) { return shoal::ReadFileBytes(path).value_or(""); }

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// The rendered objects; a render that fails is this test's failure.
std::vector<YAML::Node> Render(const std::string& dir) {
  std::string error;
  std::vector<YAML::Node> docs = shoal::testing::k8s::Render(dir, &error);
  EXPECT_TRUE(error.empty()) << error;
  return docs;
}

// A process with `env` added, stdout+stderr to `log`.
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f != nullptr) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

// Waits up to `seconds`; -1 if still running (then killed).
int WaitExit(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

struct Ran {
  int rc;
  std::string out;
};
Ran RunToEnd(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log, int seconds = 60) {
  const int rc = WaitExit(Spawn(argv, env, log), seconds);
  return {rc, ReadFile(log)};
}

bool WaitFor200(uint16_t port, const std::string& path, int seconds, HttpResult* last) {
  for (int i = 0; i < seconds * 10; ++i) {
    *last = Http(port, "GET", path, {}, {}, 0, 1000);
    if (last->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool WaitForLog(const std::string& log, const std::string& needle, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (ReadFile(log).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Rewrites `node`'s config file (its --config, mounted from the ConfigMap) for this host: its
// paths mapped onto the node's directory, the gateway and control ports set to `gateway` and
// `control`, the FL peer port to a free one (other tests' nodes on this host may hold 8082).
// The config as written.
YAML::Node PlaceNodeConfig(const PodOnHost& node, uint16_t gateway, uint16_t control) {
  const std::string config = node.MapPath(node.Flag("--config"));
  YAML::Node cfg = YAML::LoadFile(config);
  for (const char* key : {"state_dir", "bpf_pin_root", "checkpoint_dir"}) {
    cfg[key] = node.MapPath(cfg[key].as<std::string>());
  }
  cfg["listen_port"] = gateway;
  cfg["control_port"] = control;
  cfg["fl_peer_port"] = FreePort();
  YAML::Emitter em;
  em << cfg;
  WriteFile(config, em.c_str());
  return cfg;
}

// Each of `container`'s HTTP probes (liveness, readiness) answers 200 on `port` within
// `seconds`; a failure names `what`, the probe, its answer, the command line and its log.
void ExpectProbesAnswer(const YAML::Node& container, uint16_t port, int seconds,
                        const std::string& what, const std::vector<std::string>& argv,
                        const std::string& log) {
  HttpResult last;
  for (const char* probe : {"livenessProbe", "readinessProbe"}) {
    const std::string path = container[probe]["httpGet"]["path"].as<std::string>();
    EXPECT_TRUE(WaitFor200(port, path, seconds, &last))
        << what << " " << probe << " " << path << ": " << last.status << " " << last.body
        << last.error << "\n"
        << Join(argv) << "\n"
        << ReadFile(log);
  }
}

using shoal::testing::TempDir;

const std::vector<std::string> kRenders = {"", "overlays/dev", "overlays/gpu", "overlays/hugepages",
                                           "overlays/with-etcd"};

std::map<std::string, std::string> NodeFieldRefs() {
  return {{"spec.nodeName", "k8s-test-node"},
          {"status.hostIP", "127.0.0.1"},
          {"metadata.name", "shoal-controller-test-0"}};
}

// ---- shoald's args, config and mounts, every render -------------------------------------

TEST(K8sShoald, EveryRendersArgsAreAcceptedAndItsConfigLiesOnItsMounts) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string& dir : kRenders) {
    SCOPED_TRACE("deploy/k8s/" + dir);
    const auto docs = Render(dir);
    const YAML::Node ds = Find(docs, "DaemonSet", "shoald");
    ASSERT_TRUE(ds) << "no DaemonSet shoald";
    const YAML::Node spec = PodSpec(ds);
    const YAML::Node c = NamedItem(spec["containers"], "shoald");
    ASSERT_TRUE(c);
    TempDir tmp("shoal-k8s");
    PodOnHost pod(docs, spec, c, tmp.path(), NodeFieldRefs(), {});
    EXPECT_TRUE(pod.problems().empty()) << Join(pod.problems());
    std::vector<std::string> argv = pod.Argv();
    ASSERT_EQ(argv[0], BinDir() + "/shoald") << "command " << c["command"];
    argv.push_back("--print-config");
    const Ran r = RunToEnd(argv, {}, tmp.path() + "/print.log");
    ASSERT_EQ(r.rc, 0) << Join(argv) << "\n" << r.out;
    const YAML::Node eff = YAML::Load(r.out);
    EXPECT_EQ(eff["node_name"].as<std::string>(), "k8s-test-node") << r.out;
    EXPECT_EQ(eff["advertise_host"].as<std::string>(), "127.0.0.1") << r.out;
    const YAML::Node cluster = FindGenerated(docs, "ConfigMap", "shoal-cluster");
    ASSERT_TRUE(cluster);
    EXPECT_EQ(eff["etcd"].as<std::string>(), cluster["data"]["etcd"].as<std::string>());
    EXPECT_EQ(eff["cluster"].as<std::string>(), cluster["data"]["cluster"].as<std::string>());

    // The gateway's port: containerPort, both probes, the config.
    const int listen = eff["listen_port"].as<int>();
    EXPECT_EQ(NamedItem(c["ports"], "gateway")["containerPort"].as<int>(), listen);
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["port"].as<int>(), listen);
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["port"].as<int>(), listen);
    // The FL peer links' port (node to node), the one shoald listens on for them.
    EXPECT_EQ(NamedItem(c["ports"], "fl-peer")["containerPort"].as<int>(),
              eff["fl_peer_port"].as<int>());
    EXPECT_EQ(c["ports"].size(), 2u) << "a port shoald does not listen on, or one not checked";
    EXPECT_TRUE(spec["hostNetwork"].as<bool>(false)) << "the README says hostNetwork";
    EXPECT_EQ(spec["dnsPolicy"].as<std::string>(""), "ClusterFirstWithHostNet");
    EXPECT_EQ(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as<int>(), 1);
    // The control API stays on the node's loopback (hostNetwork: the node's loopback).
    EXPECT_EQ(eff["control_listen_host"].as<std::string>(), "127.0.0.1");

    // Mounts: the state on the node (hostPath), the pins in the host's bpffs, writable.
    const std::string state = eff["state_dir"].as<std::string>();
    const std::string state_mount = pod.MountOf(state);
    ASSERT_FALSE(state_mount.empty()) << "state_dir " << state << " is on no volume";
    EXPECT_TRUE(pod.volume(state_mount)["hostPath"]) << "state_dir must outlive the pod";
    EXPECT_FALSE(pod.read_only(state_mount));
    const std::string pins = eff["bpf_pin_root"].as<std::string>();
    const std::string pin_mount = pod.MountOf(pins);
    ASSERT_EQ(pin_mount, "/sys/fs/bpf") << "bpf_pin_root " << pins;
    EXPECT_EQ(pod.volume(pin_mount)["hostPath"]["path"].as<std::string>(), "/sys/fs/bpf");
    EXPECT_FALSE(pod.read_only(pin_mount));
    EXPECT_FALSE(pod.MountOf("/dev/shm").empty()) << "the pools' /dev/shm is not mounted";
    // The FL checkpoint store lies on volume "checkpoints" (the ReadWriteMany PVC every node
    // shares, or the dev overlay's emptyDir: both checked below), writable.
    const std::string ckpt_dir = eff["checkpoint_dir"].as<std::string>();
    const std::string ckpt_mount = pod.MountOf(ckpt_dir);
    ASSERT_FALSE(ckpt_mount.empty()) << "checkpoint_dir " << ckpt_dir << " is on no volume";
    EXPECT_EQ(NamedItem(spec["volumes"], "checkpoints"), pod.volume(ckpt_mount))
        << "checkpoint_dir " << ckpt_dir << " is not on volume checkpoints";
    EXPECT_FALSE(pod.read_only(ckpt_mount));
    const std::string config_arg = pod.Flag("--config");
    EXPECT_TRUE(pod.volume(pod.MountOf(config_arg))["configMap"]) << config_arg;

    // Overlays' own promises.
    const YAML::Node res = c["resources"];
    if (dir == "overlays/hugepages") {
      EXPECT_EQ(eff["pool"].as<std::string>(), "dpdk");
      const std::string hp = pod.MountOf("/dev/hugepages");
      ASSERT_EQ(hp, "/dev/hugepages");
      EXPECT_EQ(pod.volume(hp)["emptyDir"]["medium"].as<std::string>(), "HugePages-2Mi");
      EXPECT_EQ(res["requests"]["hugepages-2Mi"].as<std::string>(),
                res["limits"]["hugepages-2Mi"].as<std::string>("none"));
    } else {
      EXPECT_EQ(eff["pool"].as<std::string>(), "auto");
    }
    if (dir == "overlays/gpu") {
      EXPECT_EQ(res["limits"]["nvidia.com/gpu"].as<int>(), 1);
      EXPECT_EQ(spec["nodeSelector"]["nvidia.com/gpu.present"].as<std::string>(), "true");
    }
    const YAML::Node ckpt = NamedItem(spec["volumes"], "checkpoints");
    if (dir == "overlays/dev") {
      EXPECT_TRUE(ckpt["emptyDir"]) << "dev has no PVCs";
      for (const auto& d : docs) EXPECT_NE(d["kind"].as<std::string>(), "PersistentVolumeClaim");
    } else {
      const YAML::Node pvc = Find(docs, "PersistentVolumeClaim",
                                  ckpt["persistentVolumeClaim"]["claimName"].as<std::string>(""));
      ASSERT_TRUE(pvc) << "the checkpoint store's PVC";
      EXPECT_EQ(pvc["spec"]["accessModes"][0].as<std::string>(), "ReadWriteMany");
    }
  }
}

// The examples the Job applies are deploy/examples' own.
TEST(K8sExamples, TheJobsManifestsAreDeployExamples) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  const auto docs = Render("");
  const YAML::Node cm = FindGenerated(docs, "ConfigMap", "shoal-examples");
  ASSERT_TRUE(cm);
  int n = 0;
  for (const auto& kv : cm["data"]) {
    const std::string name = kv.first.as<std::string>();
    EXPECT_EQ(kv.second.as<std::string>(),
              ReadFile(shoal::testing::k8s::SourceDir() + "/deploy/examples/" + name))
        << "deploy/k8s/core/examples/" << name << " differs from deploy/examples/" << name;
    ++n;
  }
  EXPECT_EQ(n, 2);
}

// ---- the live cluster: etcd, the controller, a node, the examples Job -------------------

TEST(K8sLive, ControllerNodeAndJobRunAsRenderedAndEveryProbeAnswers200) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/etcd is missing (etcd-server)";
  const auto docs = Render("");
  TempDir tmp("shoal-k8s");
  shoal::testing::EtcdForTest etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.Log(0);

  // The Secret, as scripts/k8s-admin-secret makes it.
  int rc = 0;
  const std::string secret_yaml =
      Capture(shoal::testing::k8s::SourceDir() + "/scripts/k8s-admin-secret shoal", &rc);
  ASSERT_EQ(rc, 0) << secret_yaml;
  const YAML::Node secret = YAML::Load(secret_yaml);
  const std::string token = Base64Decode(secret["data"]["token"].as<std::string>());

  // shoal-controller: init container, then the container.
  const YAML::Node dep = Find(docs, "Deployment", "shoal-controller");
  ASSERT_TRUE(dep);
  EXPECT_EQ(dep["spec"]["replicas"].as<int>(), 2);
  EXPECT_TRUE(PodSpec(dep)["affinity"]["podAntiAffinity"]);
  const YAML::Node cc = NamedItem(PodSpec(dep)["containers"], "shoal-controller");
  const YAML::Node init = NamedItem(PodSpec(dep)["initContainers"], "seed-tokens");
  ASSERT_TRUE(cc && init);
  const std::map<std::string, std::string> etcd_env = {{"SHOAL_ETCD", etcd.endpoints()}};
  PodOnHost ctl(docs, PodSpec(dep), cc, tmp.path() + "/ctl", NodeFieldRefs(), etcd_env, secret);
  EXPECT_TRUE(ctl.problems().empty()) << Join(ctl.problems());
  PodOnHost seed(docs, PodSpec(dep), init, tmp.path() + "/ctl", NodeFieldRefs(), {}, secret);
  EXPECT_TRUE(seed.problems().empty()) << Join(seed.problems());
  {
    std::vector<std::string> argv = Strings(init["command"]);
    ASSERT_EQ(argv.size(), 3u);
    argv[2] = seed.MapText(argv[2]);
    const Ran r = RunToEnd(argv, {}, tmp.path() + "/seed.log");
    ASSERT_EQ(r.rc, 0) << Join(argv) << "\n" << r.out;
  }
  std::vector<std::string> cargv = ctl.Argv();
  ASSERT_EQ(cargv[0], BinDir() + "/shoal-controller");
  // --kubernetes needs an API server and the service-account token a kubelet mounts: the test
  // k8s_operator runs the operator against a real API server; here the controller runs without.
  EXPECT_NE(std::find(cargv.begin(), cargv.end(), "--kubernetes"), cargv.end());
  cargv.erase(std::remove(cargv.begin(), cargv.end(), "--kubernetes"), cargv.end());
  const int api_port = std::stoi(ctl.Flag("--port"));
  EXPECT_EQ(NamedItem(cc["ports"], "api")["containerPort"].as<int>(), api_port);
  EXPECT_EQ(cc["livenessProbe"]["httpGet"]["port"].as<int>(), api_port);
  EXPECT_EQ(cc["readinessProbe"]["httpGet"]["port"].as<int>(), api_port);
  const YAML::Node svc = Find(docs, "Service", "shoal-controller");
  ASSERT_TRUE(svc);
  EXPECT_EQ(NamedItem(svc["spec"]["ports"], "api")["targetPort"].as<int>(), api_port);
  const uint16_t ctl_port = FreePort();
  ctl.Replace(cargv, "--port", std::to_string(ctl_port));
  const std::string ctl_log = tmp.path() + "/controller.log";
  const pid_t ctl_pid = Spawn(cargv, ctl.env(), ctl_log);
  ExpectProbesAnswer(cc, ctl_port, 20, "controller", cargv, ctl_log);
  // The Secret's tokens.json holds the token the Secret hands out.
  HttpResult nodes = Http(ctl_port, "GET", "/v1/nodes", {}, {"Authorization: Bearer " + token});
  EXPECT_EQ(nodes.status, 200) << nodes.body << "\n" << ReadFile(ctl_log);
  EXPECT_EQ(Http(ctl_port, "GET", "/v1/nodes").status, 401);

  // shoald from the DaemonSet, on free ports (the config's are asserted by the test above).
  const YAML::Node ds = Find(docs, "DaemonSet", "shoald");
  const YAML::Node sc = NamedItem(PodSpec(ds)["containers"], "shoald");
  PodOnHost node(docs, PodSpec(ds), sc, tmp.path() + "/node", NodeFieldRefs(), etcd_env);
  EXPECT_TRUE(node.problems().empty()) << Join(node.problems());
  const uint16_t gw = FreePort(), control = FreePort();
  PlaceNodeConfig(node, gw, control);
  const std::vector<std::string> sargv = node.Argv();
  const std::string node_log = tmp.path() + "/shoald.log";
  const pid_t node_pid = Spawn(sargv, node.env(), node_log);
  ExpectProbesAnswer(sc, gw, 30, "shoald", sargv, node_log);
  // The node registered under its downward-API name, seen by the controller.
  bool listed = false;
  for (int i = 0; i < 100 && !listed; ++i) {
    nodes = Http(ctl_port, "GET", "/v1/nodes", {}, {"Authorization: Bearer " + token});
    listed = nodes.body.find("k8s-test-node") != std::string::npos;
    if (!listed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(listed) << nodes.body << "\n" << ReadFile(node_log);

  // The examples Job: `shoal --server=http://<Service>:<port> deploy -f ...` with the token.
  const YAML::Node job = Find(docs, "Job", "shoal-examples");
  ASSERT_TRUE(job);
  const YAML::Node jc = PodSpec(job)["containers"][0];
  PodOnHost jpod(docs, PodSpec(job), jc, tmp.path() + "/job", NodeFieldRefs(), {}, secret);
  EXPECT_TRUE(jpod.problems().empty()) << Join(jpod.problems());
  std::vector<std::string> jargv = jpod.Argv();
  const std::string server = jpod.Flag("--server");
  EXPECT_EQ(server, "http://" + svc["metadata"]["name"].as<std::string>() + ":" +
                        std::to_string(svc["spec"]["ports"][0]["port"].as<int>()));
  jpod.Replace(jargv, "--server", "http://127.0.0.1:" + std::to_string(ctl_port));
  ASSERT_EQ(jargv[0], BinDir() + "/shoal");
  EXPECT_EQ(jpod.env().at("SHOAL_TOKEN"), token);
  const Ran jr = RunToEnd(jargv, jpod.env(), tmp.path() + "/job.log");
  EXPECT_EQ(jr.rc, 0) << Join(jargv) << "\n" << jr.out << "\n" << ReadFile(ctl_log);
  const HttpResult fns =
      Http(ctl_port, "GET", "/v1/functions", {}, {"Authorization: Bearer " + token});
  EXPECT_EQ(fns.status, 200);
  EXPECT_NE(fns.body.find("\"echo\""), std::string::npos) << fns.body;
  EXPECT_NE(jr.out.find("fljob/fmnist created"), std::string::npos) << jr.out;
  // The FLJob: the controller chose the one node as its top, which runs it and publishes its
  // state.
  HttpResult jobs;
  bool running = false;
  for (int i = 0; i < 100 && !running; ++i) {
    jobs = Http(ctl_port, "GET", "/v1/jobs/fmnist", {}, {"Authorization: Bearer " + token});
    running = jobs.body.find("\"state\":\"running\"") != std::string::npos;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(running) << jobs.status << " " << jobs.body << "\n" << ReadFile(node_log);
  EXPECT_NE(jobs.body.find("\"top\":\"k8s-test-node\""), std::string::npos) << jobs.body;

  // SIGTERM (the kubelet's, after preStop) drains and ends shoald within the grace period.
  kill(node_pid, SIGTERM);
  const int grace = PodSpec(ds)["terminationGracePeriodSeconds"].as<int>();
  EXPECT_EQ(WaitExit(node_pid, grace), 0) << ReadFile(node_log);
  kill(ctl_pid, SIGTERM);
  EXPECT_EQ(WaitExit(ctl_pid, 30), 0) << ReadFile(ctl_log);
}

// ---- capabilities ---------------------------------------------------------------------

std::set<std::string> HeldCapabilities() {
  int rc = 0;
  const std::string out = Capture("capsh --print 2>/dev/null | sed -n 's/^Bounding set =//p'", &rc);
  std::set<std::string> caps;
  std::stringstream s(out);
  for (std::string c; std::getline(s, c, ',');) {
    c.erase(c.find_last_not_of(" \n") + 1);
    if (!c.empty()) caps.insert(c);
  }
  return caps;
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Starts shoald (argv) keeping exactly `keep` of the capabilities; returns its log once it
// said which data plane it runs (then stops it).
std::string StartWithCapabilities(const std::vector<std::string>& argv,
                                  const std::set<std::string>& keep,
                                  const std::map<std::string, std::string>& env,
                                  const std::string& log) {
  std::string drop;
  for (const auto& c : HeldCapabilities()) {
    if (!keep.count(c)) drop += (drop.empty() ? "" : ",") + c;
  }
  std::vector<std::string> cmd = {"capsh", "--drop=" + drop, "--", "-c", "exec \"$0\" \"$@\""};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  const pid_t pid = Spawn(cmd, env, log);
  const bool said = WaitForLog(log, "data plane: ", 20);
  kill(pid, SIGTERM);
  WaitExit(pid, 30);
  const std::string out = ReadFile(log);
  EXPECT_TRUE(said) << Join(cmd) << "\n" << out;
  return out;
}

// "" where capsh (libcap2-bin) is installed; else why the capability tests skip.
std::string CapshMissing() {
  int rc = 0;
  Capture("command -v capsh >/dev/null", &rc);
  return rc == 0 ? "" : "capsh is missing (Debian package libcap2-bin)";
}

TEST(K8sCapabilities, TheDaemonSetsSetLoadsBpfAndEachBpfCapabilityIsNeeded) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  if (auto why = shoal::bpf_test::BpfCapabilityAbsent(); !why.empty()) GTEST_SKIP() << why;
  if (auto why = CapshMissing(); !why.empty()) GTEST_SKIP() << why;
  const auto docs = Render("");
  const YAML::Node ds = Find(docs, "DaemonSet", "shoald");
  const YAML::Node sc = NamedItem(PodSpec(ds)["containers"], "shoald");
  const YAML::Node caps = sc["securityContext"]["capabilities"];
  ASSERT_EQ(Strings(caps["drop"]), std::vector<std::string>{"ALL"});
  std::set<std::string> named;
  for (const auto& c : Strings(caps["add"])) named.insert("cap_" + Lower(c));
  EXPECT_FALSE(named.count("cap_sys_admin")) << "SYS_ADMIN is for kernels before 5.8 only";
  EXPECT_FALSE(sc["securityContext"]["privileged"].as<bool>(false));

  const std::set<std::string> held = HeldCapabilities();
  std::set<std::string> keep, absent;
  for (const auto& c : named) (held.count(c) ? keep : absent).insert(c);
  for (const auto& c : absent) {
    std::printf("note: %s is named but this process does not hold it: not checked here\n",
                c.c_str());
  }

  shoal::testing::EtcdForTest etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.Log(0);
  TempDir tmp("shoal-k8s");
  int run = 0;
  auto start = [&](const std::set<std::string>& with) {
    PodOnHost node(docs, PodSpec(ds), sc, tmp.path() + "/run" + std::to_string(++run),
                   NodeFieldRefs(), {{"SHOAL_ETCD", etcd.endpoints()}});
    EXPECT_TRUE(node.problems().empty()) << Join(node.problems());
    const uint16_t gateway = FreePort(), control = FreePort();
    PlaceNodeConfig(node, gateway, control);
    std::vector<std::string> argv = node.Argv();
    // A node name per run: a restarted name would wait for its previous lease.
    node.Replace(argv, "--node-name", "k8s-cap-" + std::to_string(run));
    return StartWithCapabilities(argv, with, node.env(),
                                 tmp.path() + "/shoald" + std::to_string(run) + ".log");
  };

  // Exactly the named set: the sockmap data plane loads.
  std::string log = start(keep);
  EXPECT_NE(log.find("data plane: sockmap"), std::string::npos) << log;
  // What shoald keeps with every capability held is what the DaemonSet names.
  const std::string everything = start(held);
  const size_t k = everything.find("capabilities: kept ");
  ASSERT_NE(k, std::string::npos) << everything;
  std::set<std::string> kept;
  std::stringstream ks(everything.substr(k + 19, everything.find(';', k) - k - 19));
  for (std::string c; ks >> c;) kept.insert(c);
  EXPECT_EQ(kept, keep) << "shoald keeps what the DaemonSet names (held here)";

  // Each BPF capability removed: BPF does not load (unix sockets instead, saying why).
  for (const std::string c : {"cap_bpf", "cap_net_admin", "cap_perfmon"}) {
    ASSERT_TRUE(keep.count(c)) << c << " is not named";
    std::set<std::string> without = keep;
    without.erase(c);
    log = start(without);
    EXPECT_EQ(log.find("data plane: sockmap"), std::string::npos) << "without " << c << ":\n"
                                                                  << log;
    EXPECT_NE(log.find("BPF unavailable"), std::string::npos) << "without " << c << ":\n" << log;
  }
}

// shoald started from the DaemonSet under capsh keeping exactly `keep`, on free ports, its own
// node name; the test then does the least that needs the capability it left out.
class CapNode {
 public:
  CapNode(const std::vector<YAML::Node>& docs, const YAML::Node& ds, const std::string& dir,
          const std::string& node_name, const std::string& etcd, const std::set<std::string>& keep)
      : log_(dir + ".log") {
    const YAML::Node sc = NamedItem(PodSpec(ds)["containers"], "shoald");
    PodOnHost node(docs, PodSpec(ds), sc, dir, NodeFieldRefs(), {{"SHOAL_ETCD", etcd}});
    EXPECT_TRUE(node.problems().empty()) << Join(node.problems());
    port_ = FreePort();
    control_ = FreePort();
    state_ = PlaceNodeConfig(node, port_, control_)["state_dir"].as<std::string>();
    std::vector<std::string> argv = node.Argv();
    node.Replace(argv, "--node-name", node_name);
    std::string drop;
    for (const auto& c : HeldCapabilities()) {
      if (!keep.count(c)) drop += (drop.empty() ? "" : ",") + c;
    }
    cmd_ = {"capsh", "--drop=" + drop, "--", "-c", "exec \"$0\" \"$@\""};
    cmd_.insert(cmd_.end(), argv.begin(), argv.end());
    pid_ = Spawn(cmd_, node.env(), log_);
  }
  ~CapNode() { Stop(SIGTERM); }

  // Serving (readyz 200), or exited (then false).
  bool Ready() {
    HttpResult last;
    for (int i = 0; i < 300; ++i) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exit_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        pid_ = -1;
        return false;
      }
      if (Http(port_, "GET", "/readyz", {}, {}, 0, 1000).status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  int Stop(int sig) {
    if (pid_ > 0) {
      kill(pid_, sig);
      exit_ = WaitExit(pid_, 30);
      pid_ = -1;
    }
    return exit_;
  }
  std::string Token() const {
    std::istringstream conf(ReadFile(state_ + "/admin.conf"));
    for (std::string line; std::getline(conf, line);) {
      if (line.rfind("token: ", 0) == 0) return line.substr(7);
    }
    return {};
  }
  // Deploys the probe handler as `name` of tenant `ns` (no instance until invoked).
  HttpResult Deploy(const std::string& name, const std::string& ns) {
    const std::string manifest =
        "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: " + name +
        ", namespace: " + ns + "}\nspec:\n  handler:\n    library: " + BinDir() +
        "/../lib/shoal/handlers/libshoal-probe.so\n";
    return Http(control_, "POST", "/v1/functions", manifest,
                {"Content-Type: application/yaml", "Authorization: Bearer " + Token()});
  }
  HttpResult Undeploy(const std::string& name) {
    return Http(control_, "DELETE", "/v1/functions/" + name, {},
                {"Authorization: Bearer " + Token()});
  }
  HttpResult Invoke(const std::string& fn, const std::string& body) {
    return Http(port_, "POST", "/fn/" + fn, body, {}, 0, 20000);
  }
  std::string Log() const { return ReadFile(log_); }
  std::string What() const { return Join(cmd_) + "\n" + Log(); }
  pid_t pid() const { return pid_; }

 private:
  std::string log_, state_;
  std::vector<std::string> cmd_;
  uint16_t port_ = 0, control_ = 0;
  pid_t pid_ = -1;
  int exit_ = -1;
};

bool WaitForText(const std::function<std::string()>& read, const std::string& needle, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (read().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The capabilities besides BPF's: shoald started with the DaemonSet's set less one of them
// fails at something concrete, with an error that names it. With the whole set the same work
// succeeds (the first node), so each failure is the missing capability's.
TEST(K8sCapabilities, EachOtherCapabilityIsNeededForWhatItIsNamedFor) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/etcd is missing (etcd-server)";
  if (geteuid() != 0) GTEST_SKIP() << "not root: shoald runs no instance under a tenant's uid";
  if (auto why = CapshMissing(); !why.empty()) GTEST_SKIP() << why;
  const auto docs = Render("");
  const YAML::Node ds = Find(docs, "DaemonSet", "shoald");
  const YAML::Node sc = NamedItem(PodSpec(ds)["containers"], "shoald");
  std::set<std::string> named;
  for (const auto& c : Strings(sc["securityContext"]["capabilities"]["add"]))
    named.insert("cap_" + Lower(c));
  const std::set<std::string> held = HeldCapabilities();
  for (const auto& c : named) ASSERT_TRUE(held.count(c)) << c << " is named but not held here";
  // A Kubernetes node gives the pod its /dev/hugepages mounted (the DaemonSet's hostPath), and
  // shoald under the DaemonSet's capabilities cannot mount one itself: mount it here, as root,
  // as the node would have, so this test never depends on another having mounted it first.
  if (auto dir = shoal::HugetlbfsDir(); !dir.ok()) {
    std::fprintf(stderr, "hugetlbfs: %s (the nodes run the boost pool)\n",
                 dir.status().message().c_str());
  }

  shoal::testing::EtcdForTest etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.Log(0);
  TempDir tmp("shoal-k8s");
  const std::string pid_tag = std::to_string(getpid());
  // Every pool these nodes leave (killed ones keep theirs by design; a node started without
  // cap_chown or cap_fowner cannot finish one) is removed when the test ends, passed or not:
  // 256 MiB of hugepages each.
  struct PoolSweeper {
    std::string prefix;
    ~PoolSweeper() {
      for (const char* dir : {"/dev/shm", "/dev/hugepages"}) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
          if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
        }
      }
    }
  } sweeper{"shoal.k8s-cap-" + pid_tag + "-"};
  int run = 0;
  auto start = [&](const std::string& without, const std::string& node_name = {}) {
    std::set<std::string> keep = named;
    keep.erase(without);
    const std::string name =
        node_name.empty() ? "k8s-cap-" + pid_tag + "-" + std::to_string(run) : node_name;
    return std::make_unique<CapNode>(docs, ds, tmp.path() + "/run" + std::to_string(++run), name,
                                     etcd.endpoints(), keep);
  };
  std::set<std::string> checked = {"cap_bpf", "cap_net_admin", "cap_perfmon"};  // test above
  auto check = [&](const std::string& c) {
    EXPECT_TRUE(named.count(c)) << c << " is checked but not named";
    checked.insert(c);
  };
  // A node without capability `c` (checked), ready, that deployed probe for team-a, and the
  // answer to probe's first call, which that capability was needed for.
  auto refused_probe = [&](const std::string& c, std::unique_ptr<CapNode>* n, HttpResult* r) {
    check(c);
    *n = start(c);
    ASSERT_TRUE((*n)->Ready()) << (*n)->What();
    ASSERT_EQ((*n)->Deploy("probe", "team-a").status, 201) << (*n)->What();
    *r = (*n)->Invoke("probe", "status");
    EXPECT_NE(r->status, 200) << r->body;
  };

  // The whole set: the tenant's pool is made and handed over, an instance starts as the
  // tenant, answers, is killed by seccomp for a denied syscall (the kernel log names it),
  // and stops when its function is deleted. Then killed: its tenant-owned pool stays.
  const std::string full_name = "k8s-cap-" + pid_tag + "-full";
  {
    auto n = start("", full_name);
    ASSERT_TRUE(n->Ready()) << n->What();
    ASSERT_EQ(n->Deploy("probe", "team-a").status, 201) << n->What();
    const HttpResult ok = n->Invoke("probe", "status");
    ASSERT_EQ(ok.status, 200) << ok.body << n->What();
    EXPECT_EQ(n->Invoke("probe", "unshare").status, 502);
    EXPECT_TRUE(WaitForText([&] { return n->Log(); }, "seccomp filter for syscall unshare", 10))
        << n->What();
    ASSERT_EQ(n->Invoke("probe", "status").status, 200) << n->What();
    EXPECT_EQ(n->Undeploy("probe").status, 200) << n->What();
    EXPECT_TRUE(WaitForText([&] { return n->Log(); }, ") stopped", 10)) << n->What();
    EXPECT_EQ(n->Log().find("Operation not permitted"), std::string::npos) << n->What();
    // The set leaves CAP_SYS_ADMIN out: the detector watches opens on every syscall instead of
    // through fanotify (detect_syscalls: sampled falls back to true).
    EXPECT_NE(n->Log().find(
                  "detector: fanotify cannot watch opens (PERMISSION_DENIED: shoald does not hold "
                  "CAP_SYS_ADMIN, which fanotify's marks need): the sys_enter probe "
                  "watches every syscall instead"),
              std::string::npos)
        << n->What();
    ASSERT_EQ(n->Deploy("keep", "team-a").status, 201) << n->What();
    ASSERT_EQ(n->Invoke("keep", "status").status, 200) << n->What();
    n->Stop(SIGKILL);
  }

  // Probe's first call needs each of these: an instance's start (setgroups/setresgid,
  // setresuid: the call's answer says which step was refused) and the tenant's pool (handed to
  // the tenant with chown, then made 0600 with chmod of a file shoald no longer owns: shoald's
  // log says the pool was refused).
  struct Refused {
    std::string cap, in_answer, in_log;
  };
  for (const Refused& k : std::vector<Refused>{
           {"cap_setgid", "sandbox: clearing supplementary groups: Operation not permitted", ""},
           {"cap_setuid", "sandbox: setresuid: Operation not permitted", ""},
           {"cap_chown", "", "no pool for tenant team-a: PERMISSION_DENIED: chown /dev/"},
           {"cap_fowner", "", "no pool for tenant team-a: PERMISSION_DENIED: chmod /dev/"}}) {
    SCOPED_TRACE("without " + k.cap);
    std::unique_ptr<CapNode> n;
    HttpResult r;
    ASSERT_NO_FATAL_FAILURE(refused_probe(k.cap, &n, &r));
    if (!k.in_answer.empty()) {
      EXPECT_TRUE(Contains(r.body, k.in_answer)) << r.status << "\n" << n->What();
    }
    if (!k.in_log.empty()) {
      EXPECT_TRUE(WaitForText([&] { return n->Log(); }, k.in_log, 5)) << n->What();
    }
  }
  {
    // shoald empties its own bounding set at start-up, as it does each instance's.
    SCOPED_TRACE("without cap_setpcap");
    check("cap_setpcap");
    auto n = start("cap_setpcap");
    EXPECT_FALSE(n->Ready()) << n->What();
    EXPECT_EQ(n->Stop(SIGTERM), 1) << n->What();
    EXPECT_NE(n->Log().find("capabilities: PERMISSION_DENIED: dropping cap_"), std::string::npos)
        << n->What();
    EXPECT_NE(n->Log().find(" from the bounding set: Operation not permitted"), std::string::npos)
        << n->What();
  }
  {
    // Signalling an instance that runs under its tenant's uid.
    SCOPED_TRACE("without cap_kill");
    check("cap_kill");
    auto n = start("cap_kill");
    ASSERT_TRUE(n->Ready()) << n->What();
    ASSERT_EQ(n->Deploy("probe", "team-a").status, 201) << n->What();
    ASSERT_EQ(n->Invoke("probe", "status").status, 200) << n->What();
    EXPECT_EQ(n->Undeploy("probe").status, 200) << n->What();
    EXPECT_TRUE(WaitForText([&] { return n->Log(); }, "SIGTERM: Operation not permitted", 10))
        << n->What();
  }
  {
    // The kernel's record of a seccomp kill (/dev/kmsg, dmesg_restrict=1 here).
    SCOPED_TRACE("without cap_syslog");
    check("cap_syslog");
    if (ReadFile("/proc/sys/kernel/dmesg_restrict").rfind('1', 0) != 0) {
      ADD_FAILURE() << "kernel.dmesg_restrict is not 1: /dev/kmsg is readable without it";
    }
    auto n = start("cap_syslog");
    ASSERT_TRUE(n->Ready()) << n->What();
    ASSERT_EQ(n->Deploy("probe", "team-a").status, 201) << n->What();
    EXPECT_EQ(n->Invoke("probe", "unshare").status, 502) << n->What();
    EXPECT_TRUE(WaitForText([&] { return n->Log(); }, "no audit record in the kernel log", 10))
        << n->What();
  }
  {
    // Taking over the pool the killed shoald left: it belongs to the tenant, mode 0600.
    SCOPED_TRACE("without cap_dac_override");
    check("cap_dac_override");
    auto n = start("cap_dac_override", full_name);
    ASSERT_TRUE(n->Ready()) << n->What();
    ASSERT_EQ(n->Deploy("keep", "team-a").status, 201) << n->What();
    const HttpResult r = n->Invoke("keep", "status");
    EXPECT_NE(r.status, 200) << r.body;
    EXPECT_TRUE(WaitForText(
        [&] { return n->Log(); },
        "no pool for tenant team-a: PERMISSION_DENIED: pool shoal." + full_name + ".team-a", 5))
        << n->What();
  }
  EXPECT_EQ(checked, named) << "a named capability without a check of what needs it";
}

// ---- etcd -----------------------------------------------------------------------------

TEST(K8sEtcd, FlagsAreEtcdsAndMembersPeersAndServicesAgree) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/etcd is missing (etcd-server)";
  int rc = 0;
  const std::string help = Capture("/usr/bin/etcd --help 2>&1", &rc);
  for (const std::string dir : {"overlays/with-etcd", "overlays/dev"}) {
    SCOPED_TRACE(dir);
    const auto docs = Render(dir);
    const YAML::Node sts = Find(docs, "StatefulSet", "shoal-etcd");
    ASSERT_TRUE(sts);
    const YAML::Node c = PodSpec(sts)["containers"][0];
    const int replicas = sts["spec"]["replicas"].as<int>();
    EXPECT_EQ(replicas, dir == "overlays/dev" ? 1 : 3);
    std::map<std::string, std::string> flags;
    for (const std::string& a : Strings(c["args"])) {
      const std::string name = a.substr(0, a.find('='));
      EXPECT_NE(help.find("  " + name + " "), std::string::npos) << name << " is not an etcd flag";
      flags[name] = a.substr(a.find('=') + 1);
    }
    // --initial-cluster names every member by its pod name and the headless Service.
    const std::string svc = sts["spec"]["serviceName"].as<std::string>();
    std::string want;
    for (int i = 0; i < replicas; ++i) {
      const std::string pod = "shoal-etcd-" + std::to_string(i);
      want += (i ? "," : "") + pod + "=http://" + pod + "." + svc + ":2380";
    }
    EXPECT_EQ(flags["--initial-cluster"], want);
    const YAML::Node headless = Find(docs, "Service", svc);
    ASSERT_TRUE(headless);
    EXPECT_EQ(headless["spec"]["clusterIP"].as<std::string>(), "None");
    EXPECT_TRUE(headless["spec"]["publishNotReadyAddresses"].as<bool>(false));
    // The client Service the ConfigMap names serves the port etcd listens on.
    const std::string url =
        FindGenerated(docs, "ConfigMap", "shoal-cluster")["data"]["etcd"].as<std::string>();
    const YAML::Node client = Find(docs, "Service", "shoal-etcd-client");
    ASSERT_TRUE(client);
    const int port = client["spec"]["ports"][0]["port"].as<int>();
    EXPECT_EQ(url, "http://shoal-etcd-client:" + std::to_string(port));
    EXPECT_EQ(flags["--listen-client-urls"], "http://0.0.0.0:" + std::to_string(port));
    EXPECT_EQ(
        client["spec"]["selector"]["app.kubernetes.io/name"].as<std::string>(),
        sts["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"].as<std::string>());
    const bool pvc = static_cast<bool>(sts["spec"]["volumeClaimTemplates"]);
    EXPECT_EQ(pvc, dir != "overlays/dev");
  }
}

// The dev overlay's one-member etcd started from its StatefulSet (command, args, env, data
// volume): both probes answer 200 on the client port the flags listen on, and the container's
// ports are the flags' ports. Mapped, each asserted first: the image's /usr/local/bin/etcd is
// Debian's /usr/bin/etcd, the pod's DNS name (<pod>.<headless Service>) is 127.0.0.1, and the
// ports are free ones (another etcd may hold 2379 here).
TEST(K8sEtcd, TheDevMemberStartsFromItsStatefulSetAndBothProbesAnswer200) {
  if (auto why = KubectlMissing(); !why.empty()) GTEST_SKIP() << why;
  if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/etcd is missing (etcd-server)";
  const auto docs = Render("overlays/dev");
  const YAML::Node sts = Find(docs, "StatefulSet", "shoal-etcd");
  ASSERT_TRUE(sts);
  const YAML::Node c = NamedItem(PodSpec(sts)["containers"], "etcd");
  ASSERT_TRUE(c);
  TempDir tmp("shoal-k8s");
  const std::string pod_name = sts["metadata"]["name"].as<std::string>() + "-0";
  PodOnHost pod(docs, PodSpec(sts), c, tmp.path(), {{"metadata.name", pod_name}}, {});
  EXPECT_TRUE(pod.problems().empty()) << Join(pod.problems());
  std::vector<std::string> argv = pod.Argv();
  ASSERT_EQ(argv[0], "/usr/local/bin/etcd");
  argv[0] = "/usr/bin/etcd";
  const int client = NamedItem(c["ports"], "etcd-client")["containerPort"].as<int>();
  const int peer = NamedItem(c["ports"], "etcd-server")["containerPort"].as<int>();
  EXPECT_EQ(pod.Flag("--listen-client-urls"), "http://0.0.0.0:" + std::to_string(client));
  EXPECT_EQ(pod.Flag("--listen-peer-urls"), "http://0.0.0.0:" + std::to_string(peer));
  const std::string dns = pod_name + "." + sts["spec"]["serviceName"].as<std::string>();
  EXPECT_EQ(pod.Flag("--initial-advertise-peer-urls"),
            "http://" + dns + ":" + std::to_string(peer));
  EXPECT_EQ(pod.Flag("--advertise-client-urls"), "http://" + dns + ":" + std::to_string(client));
  EXPECT_EQ(pod.MountOf(pod.Flag("--data-dir")), "/var/lib/etcd") << "etcd's data on no volume";
  const uint16_t free_client = FreePort(), free_peer = FreePort();
  auto replace_all = [](std::string s, const std::string& from, const std::string& to) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
      s.replace(at, from.size(), to);
    return s;
  };
  for (std::string& a : argv) {
    a = replace_all(a, dns, "127.0.0.1");
    a = replace_all(a, ":" + std::to_string(client), ":" + std::to_string(free_client));
    a = replace_all(a, ":" + std::to_string(peer), ":" + std::to_string(free_peer));
  }
  const std::string log = tmp.path() + "/etcd.log";
  const pid_t pid = Spawn(argv, pod.env(), log);
  HttpResult last;
  for (const char* probe : {"livenessProbe", "readinessProbe"}) {
    EXPECT_EQ(c[probe]["httpGet"]["port"].as<int>(), client) << probe;
    const std::string path = c[probe]["httpGet"]["path"].as<std::string>();
    EXPECT_TRUE(WaitFor200(free_client, path, 30, &last))
        << "etcd " << probe << " " << path << ": " << last.status << " " << last.body << last.error
        << "\n"
        << Join(argv) << "\n"
        << ReadFile(log);
  }
  // SIGTERM ends it within the pod's default grace period (etcd re-raises it: 128 + 15).
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, 30), 128 + SIGTERM) << ReadFile(log);
}

}  // namespace
