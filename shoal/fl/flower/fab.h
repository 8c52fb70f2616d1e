// A Flower App Bundle (the zip `flwr build` writes): its bytes, its hash (SHA-256 hex, the
// FAB's name on the Fleet API) and the identity a SuperNode checks the bundle against
// (fab_id "<publisher>/<name>" and the version, from the bundle's pyproject.toml).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::flower {

struct AppBundle {
  std::shared_ptr<const std::string> bytes;
  std::string hash;     // sha256 hex of bytes
  std::string fab_id;   // "<tool.flwr.app.publisher>/<project.name>"
  std::string version;  // project.version
};

// Reads `path` (a .fab); kInvalidArgument naming what is missing when it is not a FAB.
Result<AppBundle> LoadFab(const std::string& path);
// The same from bytes.
Result<AppBundle> ParseFab(std::string bytes);

}  // namespace shoal::flower
