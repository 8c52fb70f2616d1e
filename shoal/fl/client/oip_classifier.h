// An Open Inference Protocol client that classifies a dataset through a served model: many
// keep-alive connections POST /v2/models/{model}/infer with the binary-data extension (a batch
// of images per request), and every answer is scored against its labels under the model
// version that answered. What `shoal-client --infer` runs (the demo's last act).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>

#include "shoal/common/status.h"
#include "shoal/tools/flsim/dataset.h"

namespace shoal::client {

struct OipClassifyOptions {
  std::string server;       // "http://127.0.0.1:8080"
  std::string model;        // OIP model name
  int connections = 8;      // concurrent keep-alive connections (threads)
  int batch = 8;            // images per request
  double max_seconds = 60;  // stop cycling through the data after this long
  // Polled about once a second while cycling: true stops the cycling (e.g. the FL job is
  // done). Then one more full pass over the data runs, scored as the final pass.
  std::function<bool()> done;
  std::ostream* log = nullptr;  // a line per new model version seen
};

struct VersionScore {
  uint64_t images = 0;
  uint64_t correct = 0;
  double accuracy() const { return images ? double(correct) / double(images) : 0.0; }
};

struct OipClassifySummary {
  std::map<uint64_t, VersionScore> by_version;        // while cycling
  std::map<uint64_t, VersionScore> final_by_version;  // the final full pass
  uint64_t requests = 0;
  uint64_t failed = 0;  // non-200 answers or transport errors
  std::string first_error;
  double seconds = 0;
  double p50_ms = 0, p99_ms = 0;
};

// kUnavailable when the server cannot be reached at all.
Result<OipClassifySummary> ClassifyOverOip(const OipClassifyOptions& options, const Dataset& data);

}  // namespace shoal::client
