// deploy/k8s as the tests read it: `kubectl kustomize` renders a directory, and PodOnHost places
// one container of a rendered pod on this machine (its volumes on temporary directories, its env
// resolved from the downward API, ConfigMaps and Secrets, its command and args expanded as the
// kubelet expands $(VAR)). The k8s consistency tests check the manifests against the binaries
// with it, and the netns cluster (netns_cluster.h) starts every node's shoald from the rendered
// DaemonSet with it, so the manifests and the tested cluster cannot drift apart.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

namespace shoal::testing::k8s {

// The source tree's root (deploy/k8s lies below it).
std::string SourceDir();

// `sh -c cmd`'s standard output, its exit status in *rc (-1 when it did not exit).
std::string Capture(const std::string& cmd, int* rc);

// What is missing to render the manifests here, or "".
std::string KubectlMissing();

// The objects `kubectl kustomize deploy/k8s/<dir>` renders ("" for the base); empty with `error`
// set when it renders nothing or its output does not parse.
std::vector<YAML::Node> Render(const std::string& dir, std::string* error);

YAML::Node Find(const std::vector<YAML::Node>& docs, const std::string& kind,
                const std::string& name);
// A generated object (its name carries kustomize's hash) by its base name.
YAML::Node FindGenerated(const std::vector<YAML::Node>& docs, const std::string& kind,
                         const std::string& base);
// The item of a list (containers, volumes, ports, env) with that name.
YAML::Node NamedItem(const YAML::Node& list, const std::string& name);
std::vector<std::string> Strings(const YAML::Node& n);
inline YAML::Node PodSpec(const YAML::Node& workload) {
  return workload["spec"]["template"]["spec"];
}
std::string Base64Decode(const std::string& in);

// One container of a rendered pod, placed on this machine. Volumes land on <dir>/vol-<name>,
// except hostPath /sys/fs/bpf (a directory of the real bpffs, so that pins work) and /dev/shm
// (shm_open's directory); ConfigMap and Secret volumes are written out. The image's
// /opt/shoal/bin is this build's bin directory. What the manifests leave unresolved (a
// downward-API field not given, a ConfigMap or Secret not rendered, a mount without a volume)
// is listed in problems().
class PodOnHost {
 public:
  // `field_refs`: the downward API's values (spec.nodeName, status.hostIP, metadata.name);
  // `overrides`: env values the caller replaces (SHOAL_ETCD: the test's etcd); `bpffs_dir`: the
  // bpffs directory hostPath /sys/fs/bpf stands for ("": /sys/fs/bpf/shoal-k8s-test-<pid>,
  // removed with this object; a given one is the caller's to remove).
  PodOnHost(const std::vector<YAML::Node>& docs, const YAML::Node& pod_spec,
            const YAML::Node& container, const std::string& dir,
            std::map<std::string, std::string> field_refs,
            std::map<std::string, std::string> overrides, const YAML::Node& secret = {},
            const std::string& bpffs_dir = {});
  ~PodOnHost();
  PodOnHost(const PodOnHost&) = delete;
  PodOnHost& operator=(const PodOnHost&) = delete;

  const std::vector<std::string>& problems() const { return problems_; }

  // The mount a container path lies on ("" if none).
  std::string MountOf(const std::string& path) const;
  // A container path as a host path (the image's binaries: this build's).
  std::string MapPath(const std::string& path) const;
  // Every container path in `text` (a shell command) mapped.
  std::string MapText(std::string text) const;
  // $(VAR) expanded from the env (the kubelet's rule; unknown names stay as written);
  // `manifest`: the manifest's values, before overrides.
  std::string Expand(const std::string& s, bool manifest = false) const;
  // command + args, expanded, absolute paths mapped (also in --flag=/path).
  std::vector<std::string> Argv() const;
  // The value of --name=V in the expanded args (as the manifest has it, before overrides).
  std::string Flag(const std::string& name) const;
  static void Replace(std::vector<std::string>& argv, const std::string& flag,
                      const std::string& value);
  const std::map<std::string, std::string>& env() const { return env_; }
  const YAML::Node& volume(const std::string& mount) const { return volumes_.at(mount); }
  bool read_only(const std::string& mount) const { return read_only_.at(mount); }

 private:
  YAML::Node container_;
  std::string bpf_dir_;
  bool own_bpf_dir_ = false;
  std::vector<std::string> problems_;
  std::map<std::string, std::string> env_, manifest_env_, mounts_;
  std::map<std::string, YAML::Node> volumes_;
  std::map<std::string, bool> read_only_;
};

}  // namespace shoal::testing::k8s
