// Where the shoal CLI finds its node and its credentials. Like kubectl's kubeconfig: a YAML
// file ($SHOAL_CONFIG, else ~/.config/shoal/config) with `server` (the control API),
// `gateway` (the public listener, for invoke), `token` and `ca` (a PEM file to trust for an
// HTTPS control API). Environment variables SHOAL_SERVER, SHOAL_GATEWAY and SHOAL_TOKEN
// override the file; command-line flags override both. A file holding a token must not be
// readable by group or others (mode 0600), as ssh insists for its keys.
#pragma once

#include <string>

#include "shoal/common/status.h"

namespace shoal::cli {

struct CliConfig {
  std::string server = "http://127.0.0.1:8081";
  std::string gateway = "http://127.0.0.1:8080";
  std::string token;
  std::string ca;
  std::string file;  // the config file read, "" if none
};

// Reads the file (when present) and the environment. kInvalidArgument names the file and the
// field (unknown key, wrong type) or the file's unsafe mode.
Result<CliConfig> LoadCliConfig();

}  // namespace shoal::cli
