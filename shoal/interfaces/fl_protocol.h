// The FL job protocol's replies and reports (/v1/jobs/{job}/join, /task, /eval), one type each for
// both ends: the coordinator returns them through JobService, the client SDK (FlHttpClient) reads
// them off the wire.
#pragma once

#include <cstdint>
#include <string>

namespace shoal {

struct JoinResult {
  std::string client_id;
  std::string token;
};

struct TaskResult {
  enum class Kind { kTrain, kWait, kDone } kind = Kind::kWait;
  uint64_t model_version = 0;
  uint32_t local_steps = 0;
  double learning_rate = 0;
  uint32_t batch_size = 0;
  uint32_t retry_after_ms = 0;  // kWait
};

// A secure-aggregation protocol request (spec.privacy.secureAggregation): `step` "" (GET: the
// client's view of round `round`, 0: the latest), "advertise", "shares" or "unmask" (POST, a
// JSON body that carries client_id and token).
struct SecAggRequest {
  std::string step;
  std::string client_id, token;
  uint64_t round = 0;
  std::string body;
};

struct EvalReport {
  std::string client_id, token;
  uint64_t version = 0;
  double accuracy = 0, loss = 0;
  uint64_t samples = 0;
};

}  // namespace shoal
