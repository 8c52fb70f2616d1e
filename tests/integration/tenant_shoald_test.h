// The fixture of the sandbox and zygote integration tests, on a real shoald as root: a handler
// directory holding the probe handler, shoald's options for it (tenant team-b on a fixed uid,
// the others from a uid base), and the deploy, invoke and error reads the tests make.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/shoald_fixture.h"
#include "tests/support/temp_dir.h"

namespace shoal::testing {

// Copies `from` over `to` with mode `mode`.
inline void CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  chmod(to.c_str(), mode);
}

// Function `name` of namespace `ns` whose handler is the library at `library`; `extra` is added
// under spec.
inline std::string Manifest(const std::string& name, const std::string& ns,
                            const std::string& library, const std::string& extra = "") {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: " + name +
         ", namespace: " + ns + "}\nspec:\n  handler:\n    library: " + library + "\n" + extra;
}

class TenantShoaldTest : public ::testing::Test {
 protected:
  // Skips unless root (`why` says what needs it); then a fresh 0755 handler directory
  // (/tmp/<prefix>-XXXXXX) with the probe handler in it as libprobe.so.
  void MakeHandlerDir(const std::string& prefix, const std::string& why) {
    if (!IsRoot()) GTEST_SKIP() << why;
    handlers_ = shoal::testing::MakeTempDir(prefix, 0755);
    probe_ = handlers_ + "/libprobe.so";
    CopyFile(LibDir() + "/shoal/handlers/libshoal-probe.so", probe_, 0644);
  }
  void TearDown() override {
    if (!handlers_.empty()) (void)!system(("rm -rf '" + handlers_ + "'").c_str());
  }
  // shoald on unix sockets with a 64 MiB pool and 1 MiB bodies, the handler directory and the
  // tenants; `extra` is added to its config.
  Shoald::Options TenantOptions(const std::string& extra = "") const {
    Shoald::Options o;
    o.dataplane = "unix";
    o.pool_bytes = 64ull << 20;
    o.max_body_bytes = 1ull << 20;
    o.extra_yaml = "handler_dirs: [" + handlers_ + "]\n" +
                   "tenants: {team-b: {uid: 201234, gid: 201235}}\n" +
                   "tenant_uid_base: 202000\nrestart_backoff_s: 0.05\n" + extra;
    return o;
  }
  HttpResult DeployHttp(const std::string& manifest) {
    return shoald_.Api("POST", "/v1/functions", manifest, {"Content-Type: application/yaml"});
  }
  HttpResult Invoke(const std::string& fn, const std::string& body) {
    return Http(shoald_.port(), "POST", "/fn/" + fn, body, {}, 0, 20000);
  }
  // The answer's "error" (its body when it has none).
  std::string Error(const HttpResult& r) {
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    return j.is_discarded() ? r.body : j.value("error", r.body);
  }

  Shoald shoald_;
  std::string handlers_;
  std::string probe_;
};

}  // namespace shoal::testing
