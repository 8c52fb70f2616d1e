// The client side of shoald's FL job protocol (/v1/jobs/{job}/...): join, task, model download,
// update upload, evaluation report and job status, over blocking HTTP (libcurl). One
// FlHttpClient per thread: it keeps its connection alive between requests.
//
// Errors are values. A request that got no HTTP response (refused, unresolvable, timed out)
// is kUnavailable with "cannot reach shoald at URL: ..."; an HTTP error status maps to the
// StatusCode of the same meaning with the server's {"error": "..."} message: 404 kNotFound,
// 409 kAlreadyExists (update too stale), 503 kResourceExhausted (retry after retry_after_ms()),
// 400/422 kInvalidArgument, 401/403 kPermissionDenied, 413 kTooLarge, 5xx kInternal/kUnavailable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "shoal/common/http/http_client.h"
#include "shoal/common/status.h"
#include "shoal/interfaces/fl_protocol.h"

namespace shoal::client {

// The wire types of the protocol that only the client reads this way (the join, task and eval
// ones are shoal/interfaces/fl_protocol.h's, the coordinator's too).
struct FlModelBytes {
  uint64_t version = 0;  // from X-Shoal-Model-Version (the requested one when absent)
  std::string bytes;     // safetensors
};

struct FlJobState {
  std::string state;  // "running", "done", ...
  uint64_t version = 0;
  std::string json;  // the whole status document
};

// True for the errors worth retrying the same request for: no response, 503, 502, 504.
bool IsRetryable(const Status& status);

class FlHttpClient {
 public:
  // `server` is the base URL ("http://localhost:8080"); `job` the FL job's name. Every
  // request carries `Authorization: Bearer <bearer_token>` (an fl-client token of the job, or
  // any token whose role may act on it); by default the token is $SHOAL_TOKEN.
  FlHttpClient(std::string server, std::string job, std::string bearer_token = DefaultToken());
  // $SHOAL_TOKEN, or "" when unset.
  static std::string DefaultToken();
  ~FlHttpClient();
  FlHttpClient(const FlHttpClient&) = delete;
  FlHttpClient& operator=(const FlHttpClient&) = delete;

  const std::string& server() const;
  const std::string& job() const { return job_; }

  // GET /v1/jobs/{job}
  Result<FlJobState> JobStatus();
  // POST /v1/jobs/{job}/join {"name", "token"?}
  Result<JoinResult> Join(const std::string& name, const std::string& join_token);
  // GET /v1/jobs/{job}/task?client=ID&token=T
  Result<TaskResult> Task(const std::string& client_id, const std::string& token);
  // GET /v1/jobs/{job}/model?version=N
  Result<FlModelBytes> Model(uint64_t version);
  // POST /v1/jobs/{job}/updates, body = an SHU1 update (shoal/fl/wire/update_format.h).
  Status PostUpdate(std::string_view body);
  // POST /v1/jobs/{job}/eval {"client_id","token","version","accuracy","loss","samples"}
  Status PostEval(const EvalReport& eval);

  // GET /v1/jobs/{job}/secagg?client=ID&token=T&round=R: this client's view of a secure
  // aggregation round (0: the latest), the JSON document as sent.
  Result<std::string> SecAggState(const std::string& client_id, const std::string& token,
                                  uint64_t round);
  // POST /v1/jobs/{job}/secagg/{step} (advertise, shares, unmask) with a JSON body; the reply.
  Result<std::string> SecAggPost(std::string_view step, std::string_view json_body);

  // The delay the last 503 (or 429) asked for, from Retry-After (seconds) or a JSON
  // "retry_after_ms"; 0 when it gave none.
  uint32_t retry_after_ms() const { return retry_after_ms_; }

 private:
  Result<HttpResponse> Call(const char* method, const std::string& path, std::string_view body,
                            const char* content_type);

  std::string job_;
  std::unique_ptr<HttpClient> http_;
  std::string job_path_;  // "/v1/jobs/<escaped job>"
  uint32_t retry_after_ms_ = 0;
};

}  // namespace shoal::client
