#include "shoal/fl/client/fl_http_client.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "shoal/common/http/http_client.h"
#include "shoal/common/http_status.h"

namespace shoal::client {
namespace {

using json = nlohmann::json;

// What the servers answer (HttpStatusFor) read back, but 401, which the client takes as a refusal
// like 403, and what an HTTP layer in front may send: 422 (a bad body) and 429 (busy).
StatusCode CodeForHttp(long status) {
  if (status == 401) return StatusCode::kPermissionDenied;
  if (status == 422) return StatusCode::kInvalidArgument;
  if (status == 429) return StatusCode::kResourceExhausted;
  if (auto code = StatusCodeForHttp(static_cast<int>(status))) return *code;
  return status >= 500 ? StatusCode::kInternal : StatusCode::kInvalidArgument;
}

// The server's {"error": "..."} message, or the body itself when it is not that JSON.
std::string ErrorMessage(const std::string& body) {
  auto j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    return j["error"].get<std::string>();
  }
  std::string s = body.substr(0, 200);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? "(no message)" : s;
}

Result<json> ParseObject(const std::string& body, const char* what) {
  auto j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Internal(std::string(what) + ": the reply is not a JSON object");
  return j;
}

}  // namespace

bool IsRetryable(const Status& status) {
  return status.code() == StatusCode::kUnavailable ||
         status.code() == StatusCode::kResourceExhausted ||
         status.code() == StatusCode::kDeadlineExceeded;
}

std::string FlHttpClient::DefaultToken() {
  const char* t = std::getenv("SHOAL_TOKEN");
  return t != nullptr ? t : "";
}

FlHttpClient::FlHttpClient(std::string server, std::string job, std::string bearer_token)
    : job_(std::move(job)),
      http_(std::make_unique<HttpClient>(std::move(server), std::move(bearer_token))) {
  job_path_ = "/v1/jobs/" + http_->Escape(job_);
}

FlHttpClient::~FlHttpClient() = default;

const std::string& FlHttpClient::server() const { return http_->base_url(); }

Result<HttpResponse> FlHttpClient::Call(const char* method, const std::string& path,
                                        std::string_view body, const char* content_type) {
  HttpRequest request;
  request.method = method;
  request.path = path;
  request.body = body;
  if (content_type != nullptr)
    request.headers.push_back(std::string("Content-Type: ") + content_type);
  // Large enough for a model or an update on a slow loopback, small enough that a hung server
  // does not hang a simulated client forever.
  request.timeout_ms = 120000;
  std::string error;
  std::optional<HttpResponse> reply = http_->Send(request, &error);
  if (!reply) return Unavailable("cannot reach shoald at " + server() + ": " + error);
  retry_after_ms_ = 0;
  if (reply->status >= 400) {
    if (reply->status == 503 || reply->status == 429) {
      if (auto it = reply->headers.find("retry-after"); it != reply->headers.end()) {
        retry_after_ms_ = static_cast<uint32_t>(std::strtod(it->second.c_str(), nullptr) * 1000);
      } else if (auto j = json::parse(reply->body, nullptr, false);
                 j.is_object() && j.contains("retry_after_ms") && j["retry_after_ms"].is_number()) {
        retry_after_ms_ = j["retry_after_ms"].get<uint32_t>();
      }
    }
    return Status(CodeForHttp(reply->status), std::string(method) + " " + path + ": HTTP " +
                                                  std::to_string(reply->status) + ": " +
                                                  ErrorMessage(reply->body));
  }
  return std::move(*reply);
}

Result<FlJobState> FlHttpClient::JobStatus() {
  auto reply = Call("GET", job_path_, {}, nullptr);
  if (!reply.ok()) return reply.status();
  auto j = ParseObject(reply->body, "job status");
  if (!j.ok()) return j.status();
  FlJobState s;
  s.json = std::move(reply->body);
  if (j->contains("state") && (*j)["state"].is_string()) s.state = (*j)["state"];
  if (j->contains("version") && (*j)["version"].is_number_unsigned()) s.version = (*j)["version"];
  return s;
}

Result<JoinResult> FlHttpClient::Join(const std::string& name, const std::string& join_token) {
  json req = {{"name", name}};
  if (!join_token.empty()) req["token"] = join_token;
  auto reply = Call("POST", job_path_ + "/join", req.dump(), "application/json");
  if (!reply.ok()) return reply.status();
  auto j = ParseObject(reply->body, "join");
  if (!j.ok()) return j.status();
  if (!j->contains("client_id") || !(*j)["client_id"].is_string()) {
    return Internal("join: the reply has no client_id");
  }
  JoinResult out;
  out.client_id = (*j)["client_id"];
  if (j->contains("token") && (*j)["token"].is_string()) out.token = (*j)["token"];
  return out;
}

Result<TaskResult> FlHttpClient::Task(const std::string& client_id, const std::string& token) {
  auto reply = Call(
      "GET",
      job_path_ + "/task?client=" + http_->Escape(client_id) + "&token=" + http_->Escape(token), {},
      nullptr);
  if (!reply.ok()) return reply.status();
  auto j = ParseObject(reply->body, "task");
  if (!j.ok()) return j.status();
  const std::string kind = j->value("kind", "");
  TaskResult t;
  if (kind == "train") {
    t.kind = TaskResult::Kind::kTrain;
    t.model_version = j->value("model_version", uint64_t{0});
    t.local_steps = j->value("local_steps", uint32_t{0});
    t.learning_rate = j->value("learning_rate", 0.0);
    t.batch_size = j->value("batch_size", uint32_t{0});
    if (t.local_steps == 0 || t.batch_size == 0 || !(t.learning_rate > 0)) {
      return Internal("task: a train task needs local_steps, batch_size and learning_rate > 0");
    }
  } else if (kind == "wait") {
    t.kind = TaskResult::Kind::kWait;
    t.retry_after_ms = j->value("retry_after_ms", uint32_t{500});
  } else if (kind == "done") {
    t.kind = TaskResult::Kind::kDone;
  } else {
    return Internal("task: unknown kind '" + kind + "'");
  }
  return t;
}

Result<FlModelBytes> FlHttpClient::Model(uint64_t version) {
  auto reply = Call("GET", job_path_ + "/model?version=" + std::to_string(version), {}, nullptr);
  if (!reply.ok()) return reply.status();
  FlModelBytes m;
  m.version = version;
  if (auto it = reply->headers.find("x-shoal-model-version"); it != reply->headers.end()) {
    m.version = std::strtoull(it->second.c_str(), nullptr, 10);
  }
  m.bytes = std::move(reply->body);
  return m;
}

Status FlHttpClient::PostUpdate(std::string_view body) {
  auto reply = Call("POST", job_path_ + "/updates", body, "application/octet-stream");
  return reply.ok() ? Status::Ok() : reply.status();
}

Status FlHttpClient::PostEval(const EvalReport& eval) {
  const json req = {{"client_id", eval.client_id}, {"token", eval.token},
                    {"version", eval.version},     {"accuracy", eval.accuracy},
                    {"loss", eval.loss},           {"samples", eval.samples}};
  auto reply = Call("POST", job_path_ + "/eval", req.dump(), "application/json");
  return reply.ok() ? Status::Ok() : reply.status();
}

Result<std::string> FlHttpClient::SecAggState(const std::string& client_id,
                                              const std::string& token, uint64_t round) {
  auto reply = Call("GET",
                    job_path_ + "/secagg?client=" + http_->Escape(client_id) +
                        "&token=" + http_->Escape(token) + "&round=" + std::to_string(round),
                    {}, nullptr);
  if (!reply.ok()) return reply.status();
  return std::move(reply->body);
}

Result<std::string> FlHttpClient::SecAggPost(std::string_view step, std::string_view json_body) {
  auto reply =
      Call("POST", job_path_ + "/secagg/" + std::string(step), json_body, "application/json");
  if (!reply.ok()) return reply.status();
  return std::move(reply->body);
}

}  // namespace shoal::client
