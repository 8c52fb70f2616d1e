// DocumentParser: an FLJob's spec.flower (the Flower app the job runs, shoal/fl/flower).
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "shoal/control/node/manifest_parser.h"

namespace shoal::manifest_internal {

namespace {

// A YAML scalar as Python's TOML value would type it: a quoted scalar is a string; otherwise
// true/false, an integer, a float, else a string.
FlFlowerValue TypedScalar(const YAML::Node& n) {
  FlFlowerValue v;
  v.text = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted
  if (v.text == "true" || v.text == "false") {
    v.kind = 'b';
    return v;
  }
  const char* b = v.text.data();
  const char* e = b + v.text.size();
  int64_t i = 0;
  if (auto [p, ec] = std::from_chars(b, e, i); ec == std::errc() && p == e && !v.text.empty()) {
    v.kind = 'i';
    return v;
  }
  double d = 0;
  if (auto [p, ec] = std::from_chars(b, e, d); ec == std::errc() && p == e && !v.text.empty()) {
    v.kind = 'f';
  }
  return v;
}

}  // namespace

void DocumentParser::ParseFlower(const YAML::Node& f, FlFlowerSpec& out) const {
  ExpectMap(f, "spec.flower");
  CheckKeys(f, "spec.flower",
            {"fab", "runConfig", "trainConfig", "evaluate", "supernodeAuth", "supernodes"});
  const YAML::Node fab = f["fab"];
  if (!fab) Fail("spec.flower.fab", "required: the path of the app bundle `flwr build` wrote", f);
  out.fab = String(fab, "spec.flower.fab");
  if (out.fab.empty() || out.fab[0] != '/') {
    Fail("spec.flower.fab", "must be an absolute path, got " + Quote(out.fab), fab);
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(out.fab, ec)) {
    Fail("spec.flower.fab", "no such file on this node: " + out.fab, fab);
  }
  auto config = [&](const char* key, auto& items) {
    const YAML::Node m = f[key];
    if (!m || m.IsNull()) return;
    const std::string path = std::string("spec.flower.") + key;
    ExpectMap(m, path);
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it->first.IsScalar() || it->first.Scalar().empty()) {
        Fail(path, "keys must be non-empty strings", it->first);
      }
      const std::string item = path + "." + it->first.Scalar();
      for (const auto& [k, v] : items) {
        if (k == it->first.Scalar()) Fail(item, "duplicate field", it->first);
      }
      if (!it->second.IsScalar()) {
        Fail(item, "must be a number, a string or true/false (Flower's config values)", it->second);
      }
      items.emplace_back(it->first.Scalar(), TypedScalar(it->second));
    }
  };
  config("runConfig", out.run_config);
  config("trainConfig", out.train_config);
  if (const YAML::Node e = f["evaluate"]) {
    const std::string v = e.IsScalar() ? e.Scalar() : std::string();
    if (v != "true" && v != "false") Fail("spec.flower.evaluate", "must be true or false", e);
    out.evaluate = v == "true";
  }
  // The allow-list: files of SuperNode public keys (the .pub `ssh-keygen -t ecdsa -b 384` wrote
  // beside the node's private key, as `flwr supernode register` reads it, or a PEM). Read here,
  // at deploy; the Fleet service converts each to the PEM the node sends.
  if (const YAML::Node keys = f["supernodes"]; keys && !keys.IsNull()) {
    if (!keys.IsSequence()) Fail("spec.flower.supernodes", "must be a list of key files", keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string item = "spec.flower.supernodes[" + std::to_string(i) + "]";
      const std::string path = String(keys[i], item);
      if (path.empty() || path[0] != '/') {
        Fail(item, "must be an absolute path, got " + Quote(path), keys[i]);
      }
      std::ifstream in(path, std::ios::binary);
      std::ostringstream text;
      if (!in || !(text << in.rdbuf())) Fail(item, "cannot read " + path, keys[i]);
      const std::string key = text.str();
      if (!key.starts_with("ecdsa-sha2-nistp") && !key.starts_with("-----BEGIN PUBLIC KEY-----")) {
        Fail(item,
             path +
                 " is not a SuperNode public key (an OpenSSH 'ecdsa-sha2-nistp...' line or a "
                 "PEM public key)",
             keys[i]);
      }
      out.supernodes.push_back(key);
    }
  }
  out.supernode_auth = !out.supernodes.empty();
  if (const YAML::Node a = f["supernodeAuth"]) {
    const std::string v = a.IsScalar() ? a.Scalar() : std::string();
    if (v != "true" && v != "false") Fail("spec.flower.supernodeAuth", "must be true or false", a);
    if (v == "false" && !out.supernodes.empty()) {
      Fail("spec.flower.supernodeAuth", "false with spec.flower.supernodes listed", a);
    }
    out.supernode_auth = v == "true";
  }
}

}  // namespace shoal::manifest_internal
