#include "shoal/cli/cli_config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>

namespace shoal::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

Result<CliConfig> LoadCliConfig() {
  CliConfig c;
  std::string path = Env("SHOAL_CONFIG");
  const bool explicit_path = !path.empty();
  if (path.empty() && !Env("HOME").empty()) path = Env("HOME") + "/.config/shoal/config";
  struct stat st {};
  if (!path.empty() && stat(path.c_str(), &st) == 0) {
    YAML::Node root;
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      return InvalidArgument(path + ": " + e.what());
    }
    if (!root.IsNull() && !root.IsMap()) return InvalidArgument(path + ": must be a YAML mapping");
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>("");
      std::string* field = key == "server"    ? &c.server
                           : key == "gateway" ? &c.gateway
                           : key == "token"   ? &c.token
                           : key == "ca"      ? &c.ca
                                              : nullptr;
      if (field == nullptr) {
        return InvalidArgument(path + ": " + key +
                               ": unknown key (server, gateway, token, ca) at line " +
                               std::to_string(kv.first.Mark().line + 1));
      }
      if (!kv.second.IsScalar()) return InvalidArgument(path + ": " + key + ": must be a string");
      *field = kv.second.Scalar();
    }
    if (!c.token.empty() && (st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
      return InvalidArgument(path + " holds a token but is readable by others (mode " + mode +
                             "): chmod 600 " + path);
    }
    c.file = path;
  } else if (explicit_path) {
    return InvalidArgument("SHOAL_CONFIG: cannot read " + path);
  }
  if (!Env("SHOAL_SERVER").empty()) c.server = Env("SHOAL_SERVER");
  if (!Env("SHOAL_GATEWAY").empty()) c.gateway = Env("SHOAL_GATEWAY");
  if (!Env("SHOAL_TOKEN").empty()) c.token = Env("SHOAL_TOKEN");
  return c;
}

}  // namespace shoal::cli
