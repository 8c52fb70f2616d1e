#include "shoal/common/http/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

namespace shoal::client {
namespace {

struct Transfer {
  const HttpRequest* request;
  HttpResponse* response;
  CURL* curl;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {  // a new response (after 100 Continue): start over
    t->response->headers.clear();
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
  t->response->headers[name] = std::string(value);
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (t->request->sink) {
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    t->request->sink(status, std::string_view(data, size * n));
  } else {
    t->response->body.append(data, size * n);
  }
  return size * n;
}

size_t OnRead(char* buffer, size_t size, size_t n, void* user) {
  return std::fread(buffer, 1, size * n, static_cast<FILE*>(user));
}

int OnProgress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t /*ultotal*/,
               curl_off_t /*ulnow*/) {
  auto* t = static_cast<Transfer*>(user);
  if (t->request->progress) {
    t->request->progress(static_cast<int64_t>(dlnow),
                         dltotal > 0 ? static_cast<int64_t>(dltotal) : -1);
  }
  // Non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK).
  return t->request->cancel != nullptr && t->request->cancel->load() ? 1 : 0;
}

// Runs the transfer. With a cancel flag it runs in a multi handle polled every 100 ms, so that
// a stream that carries nothing still ends soon after the flag turns (the progress callback
// alone comes about once a second).
CURLcode Perform(CURL* c, const std::atomic<bool>* cancel) {
  if (cancel == nullptr) return curl_easy_perform(c);
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return CURLE_OUT_OF_MEMORY;
  curl_multi_add_handle(multi, c);
  CURLcode rc = CURLE_OK;
  bool cancelled = false;
  int running = 1;
  while (running > 0) {
    if (cancel->load()) {
      cancelled = true;
      break;
    }
    if (curl_multi_perform(multi, &running) != CURLM_OK) {
      rc = CURLE_RECV_ERROR;
      break;
    }
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  }
  if (!cancelled && running == 0) {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
      if (m->msg == CURLMSG_DONE && m->easy_handle == c) rc = m->data.result;
    }
  }
  curl_multi_remove_handle(multi, c);
  curl_multi_cleanup(multi);
  return cancelled ? CURLE_ABORTED_BY_CALLBACK : rc;
}

bool IsContentType(const std::string& header) {
  std::string lower = header.substr(0, 13);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return lower == "content-type:";
}

}  // namespace

// One easy handle for the client's life: curl_easy_reset between requests keeps its connection
// cache, so the next request to the same server reuses the connection.
struct HttpClient::Connection {
  CURL* curl = nullptr;
  Connection() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    curl = curl_easy_init();
  }
  ~Connection() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

HttpClient::HttpClient(std::string base_url, std::string token, std::string ca)
    : base_url_(std::move(base_url)),
      ca_(std::move(ca)),
      connection_(std::make_unique<Connection>()) {
  if (!token.empty()) authorization_ = "Authorization: Bearer " + token;
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

HttpClient::~HttpClient() = default;

std::string HttpClient::Escape(std::string_view s) const {
  if (connection_->curl == nullptr) return std::string(s);
  char* e = curl_easy_escape(connection_->curl, s.data(), static_cast<int>(s.size()));
  std::string out = e != nullptr ? std::string(e) : std::string(s);
  curl_free(e);
  return out;
}

std::optional<HttpResponse> HttpClient::Send(const HttpRequest& request, std::string* error) const {
  CURL* c = connection_->curl;
  if (c == nullptr) {
    *error = "curl_easy_init failed";
    return std::nullopt;
  }
  curl_easy_reset(c);
  HttpResponse response;
  Transfer t{&request, &response, c};
  const std::string url = base_url_ + request.path;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   request.connect_timeout_ms > 0 ? request.connect_timeout_ms : 5000L);
  if (request.keepalive_probes) {
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 4L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
  }
  if (request.timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, request.timeout_ms);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  if (request.progress || request.cancel != nullptr) {
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  }

  const bool has_body = request.upload != nullptr || !request.body.empty() ||
                        request.method == "POST" || request.method == "PUT" ||
                        request.method == "PATCH";
  if (request.upload != nullptr) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, OnRead);
    curl_easy_setopt(c, CURLOPT_READDATA, request.upload);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.upload_size));
  } else if (has_body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  if (request.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (!(request.method == "GET" && !has_body) && !(request.method == "POST" && has_body)) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }

  struct curl_slist* headers = nullptr;
  bool has_content_type = false;
  for (const std::string& h : request.headers) {
    headers = curl_slist_append(headers, h.c_str());
    has_content_type = has_content_type || IsContentType(h);
  }
  // libcurl would label a POST body as a form; Shoal's bodies are opaque bytes.
  if (has_body && !has_content_type) {
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
  }
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  if (!authorization_.empty()) headers = curl_slist_append(headers, authorization_.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (!ca_.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca_.c_str());

  const CURLcode rc = Perform(c, request.cancel);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    if (request.cancel != nullptr && request.cancel->load()) {
      *error = "cancelled";
    } else {
      *error = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
    }
    return std::nullopt;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace shoal::client
