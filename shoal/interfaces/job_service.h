// What the control API needs from the FL job coordinator (shoald implements it; tests fake it).
// The update upload itself is not here: it is data path (gateway -> pool -> leaf aggregators).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/interfaces/fl_protocol.h"
#include "shoal/interfaces/fljob_spec.h"

namespace shoal {

struct ModelBlob {
  uint64_t version = 0;
  // Safetensors: the coordinator's own bytes of that version, shared (a download holds them,
  // never copies them; a later version does not change them).
  std::shared_ptr<const std::string> bytes;
};

// Which clients a job's status lists under clients.list: those numbered `from` on (c<from>,
// c<from+1>, ... in the order they joined), at most `limit`. The counts beside the list are the
// whole job's; a status costs the same at 10 clients and at 10,000 (every client listed made
// each status, and the console's and cluster's copies of it, grow with the job).
struct StatusClientsPage {
  static constexpr uint32_t kDefaultLimit = 100;
  static constexpr uint32_t kMaxLimit = 1000;
  uint64_t from = 0;
  uint32_t limit = kDefaultLimit;
};

class JobService {
 public:
  virtual ~JobService() = default;
  // Creates or updates (new generation) a job; kInvalidArgument with the field path otherwise.
  virtual Status DeployJob(const FlJobSpec& spec) = 0;
  virtual Status DeleteJob(const std::string& job) = 0;
  virtual std::vector<std::string> ListJobs() = 0;
  // The job's status as JSON (see README "FL jobs"), listing the clients of `page`; kNotFound
  // for an unknown job.
  virtual Result<std::string> JobStatusJson(const std::string& job,
                                            const StatusClientsPage& page = {}) = 0;
  // The job's namespace (metadata.namespace: its tenant); kNotFound for an unknown job.
  virtual Result<std::string> JobNamespace(const std::string& job) = 0;
  // `join_token` is the pre-shared token when the job has spec.clients.tokens ("" otherwise).
  virtual Result<JoinResult> Join(const std::string& job, const std::string& client_name,
                                  const std::string& join_token) = 0;
  virtual Result<TaskResult> Task(const std::string& job, const std::string& client_id,
                                  const std::string& token) = 0;
  virtual Result<ModelBlob> Model(const std::string& job, std::optional<uint64_t> version) = 0;
  virtual Status Evaluate(const std::string& job, const EvalReport& report) = 0;
  // The secure-aggregation protocol's routes (/v1/jobs/{job}/secagg...): the reply's JSON.
  virtual Result<std::string> SecureAggregation(const std::string& job, const SecAggRequest& req) {
    (void)req;
    return NotFound("FL job '" + job + "' does not use secure aggregation here");
  }
};

}  // namespace shoal
