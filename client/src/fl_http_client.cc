#include "shoal/client/fl_http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

namespace shoal::client {
namespace {

using json = nlohmann::json;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Escape(CURL* curl, const std::string& s) {
  char* e = curl_easy_escape(curl, s.data(), static_cast<int>(s.size()));
  std::string out = e != nullptr ? e : s;
  curl_free(e);
  return out;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {  // a new response (after 100 Continue): start over
    headers->clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
    value.remove_suffix(1);
  }
  (*headers)[name] = std::string(value);
  return size * n;
}

StatusCode CodeForHttp(long status) {
  switch (status) {
    case 400:
    case 422:
      return StatusCode::kInvalidArgument;
    case 401:
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return StatusCode::kAlreadyExists;
    case 413:
      return StatusCode::kTooLarge;
    case 429:
    case 503:
      return StatusCode::kResourceExhausted;
    case 502:
      return StatusCode::kUnavailable;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      return status >= 500 ? StatusCode::kInternal : StatusCode::kInvalidArgument;
  }
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

struct FlHttpClient::Handle {
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

struct FlHttpClient::Reply {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

std::string FlHttpClient::DefaultToken() {
  const char* t = std::getenv("SHOAL_TOKEN");
  return t != nullptr ? t : "";
}

FlHttpClient::FlHttpClient(std::string server, std::string job, std::string bearer_token)
    : server_(std::move(server)), job_(std::move(job)), handle_(std::make_unique<Handle>()) {
  if (!bearer_token.empty()) authorization_ = "Authorization: Bearer " + bearer_token;
  while (!server_.empty() && server_.back() == '/') server_.pop_back();
  GlobalInitOnce();
  handle_->curl = curl_easy_init();
  job_path_ = "/v1/jobs/" + (handle_->curl != nullptr ? Escape(handle_->curl, job_) : job_);
}

FlHttpClient::~FlHttpClient() = default;

Result<FlHttpClient::Reply> FlHttpClient::Call(const char* method, const std::string& path,
                                               std::string_view body, const char* content_type) {
  CURL* c = handle_->curl;
  if (c == nullptr) return Internal("curl_easy_init failed");
  curl_easy_reset(c);  // keeps the connection cache: the next request reuses the connection
  Reply reply;
  const std::string url = server_ + path;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  // Large enough for a model or an update on a slow loopback, small enough that a hung server
  // does not hang a simulated client forever.
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 120000L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &reply.headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply.body);

  struct curl_slist* headers = nullptr;
  const bool post = std::string_view(method) == "POST";
  if (post) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    headers = curl_slist_append(headers, (std::string("Content-Type: ") + content_type).c_str());
  }
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  if (!authorization_.empty()) headers = curl_slist_append(headers, authorization_.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    return Unavailable("cannot reach shoald at " + server_ + ": " +
                       (errbuf[0] != '\0' ? std::string(errbuf) : curl_easy_strerror(rc)));
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.status);
  retry_after_ms_ = 0;
  if (reply.status >= 400) {
    if (reply.status == 503 || reply.status == 429) {
      if (auto it = reply.headers.find("retry-after"); it != reply.headers.end()) {
        retry_after_ms_ = static_cast<uint32_t>(std::strtod(it->second.c_str(), nullptr) * 1000);
      } else if (auto j = json::parse(reply.body, nullptr, false);
                 j.is_object() && j.contains("retry_after_ms") && j["retry_after_ms"].is_number()) {
        retry_after_ms_ = j["retry_after_ms"].get<uint32_t>();
      }
    }
    return Status(CodeForHttp(reply.status), std::string(method) + " " + path + ": HTTP " +
                                                 std::to_string(reply.status) + ": " +
                                                 ErrorMessage(reply.body));
  }
  return reply;
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

Result<FlJoinReply> FlHttpClient::Join(const std::string& name, const std::string& join_token) {
  json req = {{"name", name}};
  if (!join_token.empty()) req["token"] = join_token;
  auto reply = Call("POST", job_path_ + "/join", req.dump(), "application/json");
  if (!reply.ok()) return reply.status();
  auto j = ParseObject(reply->body, "join");
  if (!j.ok()) return j.status();
  if (!j->contains("client_id") || !(*j)["client_id"].is_string()) {
    return Internal("join: the reply has no client_id");
  }
  FlJoinReply out;
  out.client_id = (*j)["client_id"];
  if (j->contains("token") && (*j)["token"].is_string()) out.token = (*j)["token"];
  return out;
}

Result<FlTask> FlHttpClient::Task(const std::string& client_id, const std::string& token) {
  CURL* c = handle_->curl;
  auto reply =
      Call("GET", job_path_ + "/task?client=" + Escape(c, client_id) + "&token=" + Escape(c, token),
           {}, nullptr);
  if (!reply.ok()) return reply.status();
  auto j = ParseObject(reply->body, "task");
  if (!j.ok()) return j.status();
  const std::string kind = j->value("kind", "");
  FlTask t;
  if (kind == "train") {
    t.kind = FlTask::Kind::kTrain;
    t.model_version = j->value("model_version", uint64_t{0});
    t.local_steps = j->value("local_steps", uint32_t{0});
    t.learning_rate = j->value("learning_rate", 0.0);
    t.batch_size = j->value("batch_size", uint32_t{0});
    if (t.local_steps == 0 || t.batch_size == 0 || !(t.learning_rate > 0)) {
      return Internal("task: a train task needs local_steps, batch_size and learning_rate > 0");
    }
  } else if (kind == "wait") {
    t.kind = FlTask::Kind::kWait;
    t.retry_after_ms = j->value("retry_after_ms", uint32_t{500});
  } else if (kind == "done") {
    t.kind = FlTask::Kind::kDone;
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

Status FlHttpClient::PostEval(const FlEval& eval) {
  const json req = {{"client_id", eval.client_id}, {"token", eval.token},
                    {"version", eval.version},     {"accuracy", eval.accuracy},
                    {"loss", eval.loss},           {"samples", eval.samples}};
  auto reply = Call("POST", job_path_ + "/eval", req.dump(), "application/json");
  return reply.ok() ? Status::Ok() : reply.status();
}

}  // namespace shoal::client
