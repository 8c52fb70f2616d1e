// What every manifest deployed through etcd carries, a cluster function's as an FL job's: its
// name and namespace, the manifest as deployed, its generation (one more per deploy) and when it
// was created and last deployed. The controller's DeployRecord stamps these; the records add what
// is their own (a function's id, a job's top).
#pragma once

#include <cstdint>
#include <string>

namespace shoal::cluster {

struct ManifestRecord {
  std::string name;
  std::string tenant = "default";
  uint64_t generation = 0;
  std::string manifest;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
};

}  // namespace shoal::cluster
