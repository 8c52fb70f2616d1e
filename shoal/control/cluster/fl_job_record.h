// An FL job deployed through the controller as etcd keeps it (<prefix>/jobs/<name>): its FLJob
// manifest as deployed (the top parses it with its own defaults), the node the controller chose
// as its top (the node running its coordinator; the other nodes fold for it), and its
// generation; and the small state its top publishes after commits (<prefix>/job-state/<name>),
// which the controller serves as the job's status.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/common/status.h"
#include "shoal/control/cluster/manifest_record.h"

namespace shoal::cluster {

struct FlJobRecord : ManifestRecord {
  std::string top;         // node name
  std::string moved_from;  // the top before, when the controller moved the job off a lost node

  std::string ToJson() const;
  static Result<FlJobRecord> FromJson(const std::string& text);
};

// The job's status as its top's coordinator gives it (GET /v1/jobs/<name> on that node), cut to
// what a client of the controller needs: the counts, the stop targets and the latest versions.
struct FlJobState {
  std::string top;     // the node that published it
  std::string status;  // JSON object text
  int64_t updated_unix_ms = 0;

  std::string ToJson() const;
  static Result<FlJobState> FromJson(const std::string& text);
  // The published cut of a coordinator's status JSON (kInvalidArgument if not an object).
  static Result<std::string> CutStatus(const std::string& status_json);
};

}  // namespace shoal::cluster
