// An FL job deployed through the controller as etcd keeps it (<prefix>/jobs/<name>): its FLJob
// manifest as deployed (the top parses it with its own defaults), the node the controller chose
// as its top (the node running its coordinator; the other nodes fold for it), and its
// generation; and the small state its top publishes after commits (<prefix>/job-state/<name>),
// which the controller serves as the job's status.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/common/status.h"

namespace shoal::cluster {

struct FlJobRecord {
  std::string name;
  std::string tenant = "default";
  std::string top;         // node name
  std::string moved_from;  // the top before, when the controller moved the job off a lost node
  uint64_t generation = 0;
  std::string manifest;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;

  std::string ToJson() const;
  static Result<FlJobRecord> FromJson(const std::string& text);
};

struct FlJobState {
  std::string top;  // the node that published it
  uint64_t version = 0;
  uint64_t round = 0;
  uint64_t updates_total = 0;
  uint64_t clients = 0;
  bool done = false;
  double accuracy = -1;  // the latest evaluation's, -1 when none
  int64_t updated_unix_ms = 0;

  std::string ToJson() const;
  static Result<FlJobState> FromJson(const std::string& text);
};

}  // namespace shoal::cluster
