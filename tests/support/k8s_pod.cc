#include "k8s_pod.h"

#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shoald_fixture.h"

namespace shoal::testing::k8s {
namespace {

namespace fs = std::filesystem;

const std::string kImageBin = "/opt/shoal/bin/";  // where scripts/image puts the binaries

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// The host's bpffs at /sys/fs/bpf, mounted where it is not yet (as a node's boot does, and as
// shoald does when it finds none); "" or why not.
std::string MountBpffs() {
  struct statfs st {};
  if (statfs("/sys/fs/bpf", &st) == 0 && st.f_type == BPF_FS_MAGIC) return {};
  if (mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0) {
    return std::string("mount bpffs on /sys/fs/bpf: ") + std::strerror(errno);
  }
  return {};
}

std::string Text(const YAML::Node& n) {
  std::stringstream s;
  s << n;
  return s.str();
}

}  // namespace

std::string SourceDir() { return SHOAL_SOURCE_DIR; }

std::string Capture(const std::string& cmd, int* rc) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string KubectlMissing() {
  int rc = 0;
  Capture("command -v kubectl >/dev/null 2>&1", &rc);
  return rc == 0 ? "" : "kubectl is missing (Debian package kubernetes-client)";
}

std::vector<YAML::Node> Render(const std::string& dir, std::string* error) {
  int rc = 0;
  const std::string out = Capture(
      "kubectl kustomize '" + SourceDir() + "/deploy/k8s/" + dir + "' 2>&1 | grep -v '^# Warning'",
      &rc);
  std::vector<YAML::Node> docs;
  try {
    for (const auto& d : YAML::LoadAll(out)) {
      if (d.IsMap()) docs.push_back(d);
    }
  } catch (const YAML::Exception& e) {
    *error = "deploy/k8s/" + dir + ": " + e.what() + "\n" + out;
    return {};
  }
  if (docs.empty()) *error = "kubectl kustomize deploy/k8s/" + dir + " rendered nothing:\n" + out;
  return docs;
}

YAML::Node Find(const std::vector<YAML::Node>& docs, const std::string& kind,
                const std::string& name) {
  for (const auto& d : docs) {
    if (d["kind"].as<std::string>() == kind && d["metadata"]["name"].as<std::string>() == name) {
      return d;
    }
  }
  return YAML::Node();
}

YAML::Node FindGenerated(const std::vector<YAML::Node>& docs, const std::string& kind,
                         const std::string& base) {
  for (const auto& d : docs) {
    const std::string n = d["metadata"]["name"].as<std::string>();
    if (d["kind"].as<std::string>() == kind && (n == base || n.rfind(base + "-", 0) == 0)) return d;
  }
  return YAML::Node();
}

YAML::Node NamedItem(const YAML::Node& list, const std::string& name) {
  for (const auto& i : list) {
    if (i["name"] && i["name"].as<std::string>() == name) return i;
  }
  return YAML::Node();
}

std::vector<std::string> Strings(const YAML::Node& n) {
  std::vector<std::string> v;
  if (n) {
    for (const auto& s : n) v.push_back(s.as<std::string>());
  }
  return v;
}

std::string Base64Decode(const std::string& in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    const size_t p = chars.find(c);
    if (p == std::string::npos) continue;
    val = (val << 6) + static_cast<int>(p);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
}

PodOnHost::PodOnHost(const std::vector<YAML::Node>& docs, const YAML::Node& pod_spec,
                     const YAML::Node& container, const std::string& dir,
                     std::map<std::string, std::string> field_refs,
                     std::map<std::string, std::string> overrides, const YAML::Node& secret,
                     const std::string& bpffs_dir)
    : container_(container) {
  for (const auto& e : container["env"]) {
    const std::string name = e["name"].as<std::string>();
    std::string value;
    if (e["value"]) {
      value = e["value"].as<std::string>();
    } else if (e["valueFrom"]["fieldRef"]) {
      const std::string f = e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
      if (!field_refs.count(f))
        problems_.push_back(name + ": downward API field " + f + " not known");
      value = field_refs[f];
    } else if (e["valueFrom"]["configMapKeyRef"]) {
      const auto ref = e["valueFrom"]["configMapKeyRef"];
      const YAML::Node cm = Find(docs, "ConfigMap", ref["name"].as<std::string>());
      if (!(cm && cm["data"][ref["key"].as<std::string>()])) {
        problems_.push_back(name + ": ConfigMap " + Text(ref["name"]) + " key " + Text(ref["key"]) +
                            " not rendered");
      }
      if (cm) value = cm["data"][ref["key"].as<std::string>()].as<std::string>("");
    } else if (e["valueFrom"]["secretKeyRef"]) {
      const auto ref = e["valueFrom"]["secretKeyRef"];
      if (!secret) problems_.push_back(name + ": needs Secret " + Text(ref["name"]));
      if (secret)
        value = Base64Decode(secret["data"][ref["key"].as<std::string>()].as<std::string>(""));
    }
    manifest_env_[name] = value;
    env_[name] = overrides.count(name) ? overrides[name] : value;
  }
  for (const auto& m : container["volumeMounts"]) {
    const std::string vol = m["name"].as<std::string>();
    const std::string mount = m["mountPath"].as<std::string>();
    const YAML::Node v = NamedItem(pod_spec["volumes"], vol);
    if (!v) {
      problems_.push_back("volumeMount " + vol + " has no volume");
      continue;
    }
    std::string host = dir + "/vol-" + vol;
    if (v["hostPath"] && v["hostPath"]["path"].as<std::string>() == "/sys/fs/bpf") {
      // A directory of the real bpffs, so that pins work and nothing clashes with others.
      own_bpf_dir_ = bpffs_dir.empty();
      host = own_bpf_dir_ ? "/sys/fs/bpf/shoal-k8s-test-" + std::to_string(getpid()) : bpffs_dir;
      bpf_dir_ = host;
      if (auto why = MountBpffs(); !why.empty()) problems_.push_back("volume " + vol + ": " + why);
    } else if (mount == "/dev/shm") {
      host = "/dev/shm";  // shm_open's directory: the pod's own tmpfs there
    }
    std::error_code ec;
    fs::create_directories(host, ec);
    if (ec) problems_.push_back("volume " + vol + ": " + host + ": " + ec.message());
    if (v["configMap"]) {
      const YAML::Node cm = Find(docs, "ConfigMap", v["configMap"]["name"].as<std::string>());
      if (!cm) {
        problems_.push_back("volume " + vol + ": ConfigMap " + Text(v["configMap"]["name"]) +
                            " not rendered");
      }
      for (const auto& kv : cm["data"]) {
        WriteFile(host + "/" + kv.first.as<std::string>(), kv.second.as<std::string>());
      }
    } else if (v["secret"]) {
      if (!secret) problems_.push_back("volume " + vol + " needs the Secret");
      for (const auto& item : v["secret"]["items"]) {
        WriteFile(host + "/" + item["path"].as<std::string>(),
                  Base64Decode(secret["data"][item["key"].as<std::string>()].as<std::string>("")));
      }
    }
    mounts_[mount] = host;
    volumes_[mount] = v;
    read_only_[mount] = m["readOnly"].as<bool>(false);
  }
}

PodOnHost::~PodOnHost() {
  std::error_code ec;
  if (own_bpf_dir_) fs::remove_all(bpf_dir_, ec);
}

std::string PodOnHost::MountOf(const std::string& path) const {
  std::string best;
  for (const auto& [m, h] : mounts_) {
    if ((path == m || path.rfind(m + "/", 0) == 0) && m.size() > best.size()) best = m;
  }
  return best;
}

std::string PodOnHost::MapPath(const std::string& path) const {
  if (path.rfind(kImageBin, 0) == 0) return BinDir() + "/" + path.substr(kImageBin.size());
  const std::string m = MountOf(path);
  return m.empty() ? path : mounts_.at(m) + path.substr(m.size());
}

std::string PodOnHost::MapText(std::string text) const {
  for (const auto& [m, h] : mounts_) {
    for (size_t at; (at = text.find(m + "/")) != std::string::npos;) text.replace(at, m.size(), h);
  }
  return text;
}

std::string PodOnHost::Expand(const std::string& s, bool manifest) const {
  const auto& env = manifest ? manifest_env_ : env_;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "$(") == 0) {
      const size_t end = s.find(')', i);
      if (end != std::string::npos && env.count(s.substr(i + 2, end - i - 2))) {
        out += env.at(s.substr(i + 2, end - i - 2));
        i = end + 1;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

std::vector<std::string> PodOnHost::Argv() const {
  std::vector<std::string> argv;
  for (const auto* field : {"command", "args"}) {
    for (const std::string& a : Strings(container_[field])) {
      std::string x = Expand(a);
      const size_t eq = x.find('=');
      if (x[0] == '/')
        x = MapPath(x);
      else if (x.rfind("--", 0) == 0 && eq != std::string::npos && x[eq + 1] == '/')
        x = x.substr(0, eq + 1) + MapPath(x.substr(eq + 1));
      argv.push_back(x);
    }
  }
  return argv;
}

std::string PodOnHost::Flag(const std::string& name) const {
  for (const std::string& a : Strings(container_["args"])) {
    if (a.rfind(name + "=", 0) == 0) return Expand(a.substr(name.size() + 1), true);
  }
  return {};
}

void PodOnHost::Replace(std::vector<std::string>& argv, const std::string& flag,
                        const std::string& value) {
  for (auto& a : argv) {
    if (a.rfind(flag + "=", 0) == 0) a = flag + "=" + value;
  }
}

}  // namespace shoal::testing::k8s
