#include "shoal/gateway/gateway.h"

#include <arpa/inet.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <array>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "shoal/common/log.h"
#include "shoal/common/payload.h"

namespace shoal {
namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string JsonError(std::string_view message) {
  std::string out = "{\"error\":\"";
  for (char c : message) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  out += "\"}\n";
  return out;
}

constexpr size_t kReadBufferBytes = 64 * 1024;
constexpr size_t kChunkedInitialBytes = 64 * 1024;
constexpr size_t kDescriptorBatch = 64;

struct InboxItem {
  enum class Kind { kAssign, kReject, kFailInstance } kind;
  uint64_t request_id = 0;
  uint32_t instance = 0;
  int status = 0;
  std::string reason;
};

}  // namespace

bool IsFleetRoute(std::string_view method, std::string_view path, std::string* job) {
  static constexpr std::string_view kJobs = "/v1/jobs/";
  if (!path.starts_with(kJobs)) return false;
  path.remove_prefix(kJobs.size());
  const size_t slash = path.find('/');
  const std::string_view name = path.substr(0, slash);
  const std::string_view sub = slash == std::string_view::npos ? "" : path.substr(slash + 1);
  if (name.empty()) return false;
  const bool fleet = (sub.empty() && method == "GET") ||
                     (sub == "join" && method == "POST") || (sub == "task" && method == "GET") ||
                     (sub == "model" && method == "GET") || (sub == "eval" && method == "POST") ||
                     (sub == "updates" && method == "POST");
  if (fleet && job != nullptr) *job = std::string(name);
  return fleet;
}

const char* HttpReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

class Connection;

// A request between "body received" and "response written": queued for an instance or
// running in one. Kept in a per-loop slab; request ids are (generation << 32 | index).
struct Pending {
  Connection* conn = nullptr;  // null once abandoned (timeout): the late answer is dropped
  std::shared_ptr<FunctionRuntime> fn;
  uint32_t gen = 0;
  uint32_t instance = 0;
  uint64_t buffer = 0;
  uint64_t length = 0;
  bool in_use = false;
  bool queued = false;
  uint64_t fl_ticket = 0;  // an FL update admitted by the coordinator (0: none)
  float fl_weight = 0;
};

class GatewayLoop {
 public:
  GatewayLoop(Gateway& gw, uint32_t index) : gw_(gw), index_(index) {}
  ~GatewayLoop();

  Status Init(int listen_fd, Endpoint endpoint);
  void Start() { thread_ = std::thread([this] { Run(); }); }
  void Stop();
  void Post(InboxItem item);

  Gateway& gw() { return gw_; }
  uint32_t index() const { return index_; }
  uv_loop_t* uv() { return &loop_; }
  const NodeConfig& config() const { return gw_.config_; }

  // Called by connections.
  void Dispatch(Connection* conn, std::shared_ptr<FunctionRuntime> fn, uint64_t buffer,
                uint64_t length, FlAdmission fl = {});
  void Abandon(uint32_t pending_index);
  void OnConnectionClosed(Connection* conn);

 private:
  void Run();
  void SendToInstance(uint32_t idx, uint32_t instance);
  void RouteAssignment(const shoal::RouteAssignment& a);
  void OnChannelReadable();
  void OnInbox();
  void OnResponse(const EventDescriptor& d);
  void FailInstance(uint32_t instance, int status, const std::string& reason);
  void Reject(uint64_t request_id, int status, const std::string& reason);
  void FlushOutbox();
  // Tells the coordinator how an FL update ended (no-op for other requests).
  // `leaf_answered`: the status is the leaf instance's own answer, not the gateway's.
  void FinishFl(Pending& p, int status, bool leaf_answered = false);
  uint32_t AllocPending();
  void FreePending(uint32_t idx);
  Pending* Lookup(uint64_t request_id, uint32_t* idx);

  Gateway& gw_;
  uint32_t index_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_poll_t channel_poll_{};
  uv_async_t inbox_async_{};
  uv_async_t stop_async_{};
  uv_timer_t retry_timer_{};
  bool initialised_ = false;
  Endpoint endpoint_;
  std::unique_ptr<DescriptorChannel> channel_;
  std::mutex inbox_mu_;
  std::vector<InboxItem> inbox_;
  std::vector<InboxItem> inbox_work_;
  std::vector<Pending> pending_;
  std::vector<uint32_t> free_pending_;
  std::deque<EventDescriptor> outbox_;
  std::vector<Connection*> connections_;
  std::thread thread_;
  friend class Connection;
};

class Connection {
 public:
  explicit Connection(GatewayLoop& loop) : loop_(loop) {
    rbuf_.reset(new char[kReadBufferBytes]);
    http_parser_init(&parser_, HTTP_REQUEST);
    parser_.data = this;
    tcp_.data = this;
    timer_.data = this;
    write_req_.data = this;
  }

  bool Accept(uv_stream_t* server) {
    uv_tcp_init(loop_.uv(), &tcp_);
    uv_timer_init(loop_.uv(), &timer_);
    if (uv_accept(server, reinterpret_cast<uv_stream_t*>(&tcp_)) != 0) return false;
    uv_tcp_nodelay(&tcp_, 1);
    return true;
  }
  void StartReading() {
    uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp_), &Connection::OnAlloc, &Connection::OnRead);
  }
  void Close();

  // A function's answer (kResponse or kError descriptor).
  void WriteFunctionResponse(const EventDescriptor& d, const std::shared_ptr<FunctionRuntime>& fn);
  void WriteError(int status, std::string_view message, bool retry_after = false);
  void OnTimeoutFired();
  void SetPending(uint32_t idx) { pending_idx_ = idx; has_pending_ = true; }
  void ClearPending() {
    has_pending_ = false;
    uv_timer_stop(&timer_);
  }
  void RecordFunctionStats(FunctionRuntime& fn, int status);
  uv_timer_t* timer() { return &timer_; }

  static const http_parser_settings kSettings;

 private:
  enum class State { kHeaders, kBody, kBusy, kClosing };
  enum class Route {
    kNone, kFunction, kControl, kMetrics, kHealthz, kReadyz, kV2Server, kV2Live, kV2Ready, kError
  };

  static void OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf);
  static void OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf);
  static void OnWritten(uv_write_t* req, int status);
  static void OnClosed(uv_handle_t* h);

  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t len);
  static int OnHeaderField(http_parser* p, const char* at, size_t len);
  static int OnHeaderValue(http_parser* p, const char* at, size_t len);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t len);
  static int OnMessageComplete(http_parser* p);

  void FinishHeader();
  int RouteRequest();
  bool AppendFunctionBody(const char* at, size_t len);
  void Consume();
  void HandleRequest();
  // `shared`, when set, is the body instead of `body` (bytes held elsewhere: a model).
  void WriteReply(int status, std::string_view content_type, std::string body,
                  const std::vector<std::pair<std::string, std::string>>& headers = {},
                  std::shared_ptr<const std::string> shared = nullptr);
  void AfterWrite();
  void ReleaseRequestBuffer();
  void SetError(int status, std::string message, bool retry_after = false) {
    route_ = Route::kError;
    error_status_ = status;
    error_message_ = std::move(message);
    error_retry_after_ = retry_after;
  }

  GatewayLoop& loop_;
  uv_tcp_t tcp_{};
  uv_timer_t timer_{};
  uv_write_t write_req_{};
  http_parser parser_{};
  std::unique_ptr<char[]> rbuf_;
  size_t rbuf_len_ = 0;
  State state_ = State::kHeaders;
  int open_handles_ = 2;

  // The request being read.
  bool message_done_ = false;
  bool keep_alive_ = true;
  bool close_after_ = false;
  uint64_t start_ns_ = 0;
  std::string url_;
  std::string header_field_, header_value_;
  bool header_in_value_ = false;
  std::string content_type_;
  std::string authorization_;  // the Authorization header's value
  auth::Principal principal_;  // who a fleet route's token names
  std::string inference_header_length_;  // OIP binary extension: Inference-Header-Content-Length
  bool expect_continue_ = false;
  Route route_ = Route::kNone;
  std::string function_name_, sub_path_, query_, path_;
  std::string fl_job_;  // POST /v1/jobs/{job}/updates: the update goes to the job's leaves
  std::shared_ptr<FunctionRuntime> fn_;
  uint64_t body_limit_ = 0;
  // Function bodies live in the pool: [payload head][body].
  uint64_t buffer_ = 0;
  std::byte* body_ptr_ = nullptr;
  uint64_t body_cap_ = 0;
  uint64_t body_len_ = 0;
  uint64_t body_expected_ = 0;
  size_t head_len_ = 0;
  bool raw_body_ = false;
  std::string small_body_;  // control API bodies
  int error_status_ = 0;
  std::string error_message_;
  bool error_retry_after_ = false;

  // The response being written.
  std::string resp_head_;
  std::string resp_body_;
  std::shared_ptr<const std::string> resp_shared_;  // held until written
  uint64_t resp_buffer_ = 0;
  std::shared_ptr<FunctionRuntime> resp_fn_;
  bool writing_ = false;

  uint32_t pending_idx_ = 0;
  bool has_pending_ = false;
};

const http_parser_settings Connection::kSettings = [] {
  http_parser_settings s{};
  s.on_message_begin = &Connection::OnMessageBegin;
  s.on_url = &Connection::OnUrl;
  s.on_header_field = &Connection::OnHeaderField;
  s.on_header_value = &Connection::OnHeaderValue;
  s.on_headers_complete = &Connection::OnHeadersComplete;
  s.on_body = &Connection::OnBody;
  s.on_message_complete = &Connection::OnMessageComplete;
  return s;
}();

// ---- Connection: reading -------------------------------------------------------------------

void Connection::OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
  auto* c = static_cast<Connection*>(h->data);
  if (c->state_ == State::kBody) {
    // The body of a Content-Length request goes straight into its pool buffer.
    *buf = uv_buf_init(reinterpret_cast<char*>(c->body_ptr_ + c->body_len_),
                       static_cast<unsigned>(std::min<uint64_t>(c->body_expected_ - c->body_len_,
                                                                1u << 30)));
    return;
  }
  *buf = uv_buf_init(c->rbuf_.get() + c->rbuf_len_,
                     static_cast<unsigned>(kReadBufferBytes - c->rbuf_len_));
}

void Connection::OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
  auto* c = static_cast<Connection*>(s->data);
  if (nread < 0) {
    c->Close();
    return;
  }
  if (nread == 0) return;
  if (c->state_ == State::kBody) {
    c->body_len_ += static_cast<uint64_t>(nread);
    if (c->body_len_ == c->body_expected_) {
      c->state_ = State::kHeaders;
      c->HandleRequest();
    }
    return;
  }
  c->rbuf_len_ += static_cast<size_t>(nread);
  c->Consume();
}

void Connection::Consume() {
  size_t pos = 0;
  while (pos < rbuf_len_ && state_ == State::kHeaders) {
    const size_t n = http_parser_execute(&parser_, &kSettings, rbuf_.get() + pos, rbuf_len_ - pos);
    const auto err = HTTP_PARSER_ERRNO(&parser_);
    if (err == HPE_PAUSED) {
      http_parser_pause(&parser_, 0);
    } else if (err != HPE_OK) {
      rbuf_len_ = 0;
      keep_alive_ = false;
      close_after_ = true;
      const int status = err == HPE_HEADER_OVERFLOW ? 431 : 400;
      state_ = State::kBusy;
      uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
      WriteError(status, std::string("malformed HTTP request: ") + http_errno_description(err));
      return;
    }
    pos += n;
    if (!message_done_) continue;
    message_done_ = false;
    if (raw_body_ && body_len_ < body_expected_) {
      // Body bytes that arrived with the headers: the only ones the gateway copies.
      const size_t take = std::min<uint64_t>(rbuf_len_ - pos, body_expected_ - body_len_);
      std::memcpy(body_ptr_ + body_len_, rbuf_.get() + pos, take);
      body_len_ += take;
      pos += take;
      if (body_len_ < body_expected_) {
        state_ = State::kBody;
        break;
      }
    }
    std::memmove(rbuf_.get(), rbuf_.get() + pos, rbuf_len_ - pos);
    rbuf_len_ -= pos;
    HandleRequest();
    return;
  }
  if (pos >= rbuf_len_) rbuf_len_ = 0;
}

int Connection::OnMessageBegin(http_parser* p) {
  auto* c = static_cast<Connection*>(p->data);
  c->start_ns_ = NowNs();
  c->url_.clear();
  c->header_field_.clear();
  c->header_value_.clear();
  c->header_in_value_ = false;
  c->content_type_.clear();
  c->authorization_.clear();
  c->inference_header_length_.clear();
  c->expect_continue_ = false;
  c->route_ = Route::kNone;
  c->fn_.reset();
  c->buffer_ = 0;
  c->body_ptr_ = nullptr;
  c->body_cap_ = c->body_len_ = c->body_expected_ = 0;
  c->raw_body_ = false;
  c->small_body_.clear();
  c->error_status_ = 0;
  c->fl_job_.clear();
  return 0;
}

int Connection::OnUrl(http_parser* p, const char* at, size_t len) {
  auto* c = static_cast<Connection*>(p->data);
  if (c->url_.size() + len > 8192) return 1;
  c->url_.append(at, len);
  return 0;
}

void Connection::FinishHeader() {
  if (header_field_.empty()) return;
  if (strcasecmp(header_field_.c_str(), "content-type") == 0) {
    content_type_ = header_value_.substr(0, 255);
  } else if (strcasecmp(header_field_.c_str(), "authorization") == 0) {
    authorization_ = header_value_;
  } else if (strcasecmp(header_field_.c_str(), "inference-header-content-length") == 0) {
    inference_header_length_ = header_value_.substr(0, 20);
  } else if (strcasecmp(header_field_.c_str(), "expect") == 0 &&
             strcasecmp(header_value_.c_str(), "100-continue") == 0) {
    expect_continue_ = true;
  }
  header_field_.clear();
  header_value_.clear();
}

int Connection::OnHeaderField(http_parser* p, const char* at, size_t len) {
  auto* c = static_cast<Connection*>(p->data);
  if (c->header_in_value_) {
    c->FinishHeader();
    c->header_in_value_ = false;
  }
  if (c->header_field_.size() < 256) c->header_field_.append(at, std::min<size_t>(len, 256));
  return 0;
}

int Connection::OnHeaderValue(http_parser* p, const char* at, size_t len) {
  auto* c = static_cast<Connection*>(p->data);
  c->header_in_value_ = true;
  if (c->header_value_.size() < 1024) c->header_value_.append(at, std::min<size_t>(len, 1024));
  return 0;
}

int Connection::OnHeadersComplete(http_parser* p) {
  auto* c = static_cast<Connection*>(p->data);
  c->FinishHeader();
  c->keep_alive_ = http_should_keep_alive(p) != 0;
  return c->RouteRequest();
}

// Decides where the request goes and prepares where its body lands. Returns 1 to take the
// body out of the parser's hands (Content-Length bodies are read straight into the pool).
int Connection::RouteRequest() {
  const bool chunked = (parser_.flags & F_CHUNKED) != 0;
  const uint64_t content_length =
      (parser_.content_length == ULLONG_MAX || chunked) ? 0 : parser_.content_length;
  const bool has_body = chunked || content_length > 0;
  const auto qpos = url_.find('?');
  path_ = url_.substr(0, qpos);
  query_ = qpos == std::string::npos ? "" : url_.substr(qpos + 1);
  const NodeConfig& cfg = loop_.config();

  auto reject = [&](int status, std::string msg, bool retry_after = false) {
    SetError(status, std::move(msg), retry_after);
    if (has_body) {
      // The body is not read: the connection closes after the answer.
      close_after_ = true;
      keep_alive_ = false;
      return 1;
    }
    return 0;
  };

  // 401 without a valid bearer token (principal_ is set otherwise); authorize() adds 403 when
  // the token's role may not take `action` on `ns`/`job`. Both return false after a reject.
  auto authenticate = [&]() -> bool {
    auth::TokenStore* tokens = loop_.gw().hooks_.tokens;
    if (tokens == nullptr) {
      reject(503, "this node has no token store: authenticated routes are unavailable");
      return false;
    }
    const std::string_view bearer = auth::BearerToken(authorization_);
    auto who = bearer.empty() ? Result<auth::Principal>(Unauthenticated(
                                    "authentication required: send 'Authorization: Bearer <token>'"))
                              : tokens->Authenticate(bearer);
    if (!who.ok()) {
      loop_.gw().metrics_.gateway_rejections.Add({{"reason", "unauthenticated"}}).Increment();
      reject(401, who.status().message());
      return false;
    }
    principal_ = std::move(*who);
    return true;
  };
  auto authorize = [&](auth::Action action, std::string_view ns, std::string_view job) -> bool {
    if (!authenticate()) return false;
    if (Status st = auth::Authorize(principal_, action, ns, job); !st.ok()) {
      loop_.gw().metrics_.gateway_rejections.Add({{"reason", "forbidden"}}).Increment();
      reject(403, st.message());
      return false;
    }
    return true;
  };

  FlDataPath* fl = loop_.gw().hooks_.fl;
  std::string fleet_job;
  const bool fleet = IsFleetRoute(http_method_str(static_cast<http_method>(parser_.method)), path_,
                                  &fleet_job);
  const bool fl_update = fl != nullptr && fleet && parser_.method == HTTP_POST &&
                         path_.compare(path_.size() - 8, 8, "/updates") == 0;
  // Open Inference Protocol: /v2/models/{model}[/versions/{v}][/infer|/ready] goes to the
  // function serving that model, exactly like /fn/{function}[/sub/path].
  const bool oip_model = path_.rfind("/v2/models/", 0) == 0;
  if (oip_model) {
    const auto slash = path_.find('/', 11);
    const std::string model =
        path_.substr(11, slash == std::string::npos ? std::string::npos : slash - 11);
    sub_path_ = slash == std::string::npos ? "" : path_.substr(slash);
    fn_ = model.empty() ? nullptr : loop_.gw().functions_.FindModel(model);
    if (!fn_ || fn_->retired.load(std::memory_order_relaxed)) {
      fn_.reset();
      return reject(404, "model '" + model + "' not found");
    }
    function_name_ = fn_->spec.name;
  }
  if (path_.rfind("/fn/", 0) == 0 || fl_update || oip_model) {
    if (fl_update) {
      fl_job_ = path_.substr(9, path_.size() - 8 - 9);
      function_name_ = fl->LeafFunction(fl_job_);
      sub_path_.clear();
    } else if (!oip_model) {
      const auto slash = path_.find('/', 4);
      function_name_ = path_.substr(4, slash == std::string::npos ? std::string::npos : slash - 4);
      sub_path_ = slash == std::string::npos ? "" : path_.substr(slash);
      // Internal functions (FL leaves, "fl.<job>") take requests only through their route.
      if (function_name_.find('.') != std::string::npos) {
        return reject(404, "function '" + function_name_ + "' not found");
      }
    }
    if (!oip_model) fn_ = loop_.gw().functions_.Find(function_name_);
    if (!fn_ || fn_->retired.load(std::memory_order_relaxed)) {
      fn_.reset();
      if (fl_update && !authenticate()) return has_body ? 1 : 0;
      return reject(404, fl_update ? "FL job '" + fl_job_ + "' not found"
                                   : "function '" + function_name_ + "' not found");
    }
    // Before any pool memory is taken: an update needs the job's FL client token (or a
    // deployer's of its namespace); a function with `auth: token` a token that may invoke it.
    if (fl_update || fn_->spec.require_token) {
      const bool allowed = fl_update ? authorize(auth::Action::kFlClient, fn_->spec.tenant, fl_job_)
                                     : authorize(auth::Action::kInvoke, fn_->spec.tenant, {});
      if (!allowed) {
        fn_.reset();
        return has_body ? 1 : 0;
      }
    }
    route_ = Route::kFunction;
    // The OIP binary extension's header length reaches the handler in the query.
    if (!inference_header_length_.empty()) {
      query_ += (query_.empty() ? "" : "&");
      query_ += "inference_header_content_length=" + inference_header_length_;
    }
    body_limit_ = fn_->spec.max_body_bytes ? fn_->spec.max_body_bytes : cfg.max_body_bytes;
    if (content_length > body_limit_) {
      return reject(413, "request body of " + std::to_string(content_length) +
                             " bytes is over the limit of " + std::to_string(body_limit_) +
                             " bytes for function '" + function_name_ + "'");
    }
    head_len_ = PayloadBodyOffset(sub_path_.size(), query_.size(), content_type_.size());
    body_cap_ = chunked ? std::min<uint64_t>(kChunkedInitialBytes, body_limit_) : content_length;
    auto buf = fn_->pool->Allocate(head_len_ + body_cap_, kShoaldSlot);
    if (!buf.ok()) {
      loop_.gw().metrics_.gateway_rejections.Add({{"reason", "pool_full"}}).Increment();
      return reject(503, "shared-memory pool of tenant '" + fn_->spec.tenant +
                             "' is full: retry later", true);
    }
    buffer_ = *buf;
    body_ptr_ = fn_->pool->Data(buffer_).data() + head_len_;
    if (!chunked && content_length > 0) {
      raw_body_ = true;
      body_expected_ = content_length;
      if (expect_continue_) {
        static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        uv_buf_t b = uv_buf_init(const_cast<char*>(kContinue), sizeof kContinue - 1);
        uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), &b, 1);
      }
      return 1;  // the parser skips the body; Consume() and OnRead() put it in the pool
    }
    return 0;
  }
  if (path_.rfind("/v1/", 0) == 0 || path_ == "/v1") {
    if (!fleet) {
      return reject(404, "the control API is not served on this listener: use the control "
                         "address (control_listen_host:control_port, loopback by default)");
    }
    if (loop_.gw().hooks_.control == nullptr) return reject(404, "no FL jobs on this node");
    // The control API knows the job's namespace and checks the token's role (403 there).
    if (!authenticate()) return has_body ? 1 : 0;
    route_ = Route::kControl;
    body_limit_ = cfg.max_body_bytes;
    if (content_length > body_limit_) return reject(413, "request body over the limit");
    if (expect_continue_ && has_body) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      uv_buf_t b = uv_buf_init(const_cast<char*>(kContinue), sizeof kContinue - 1);
      uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), &b, 1);
    }
    return 0;
  }
  if (path_ == "/v2" || path_ == "/v2/") route_ = Route::kV2Server;
  else if (path_ == "/v2/health/live") route_ = Route::kV2Live;
  else if (path_ == "/v2/health/ready") route_ = Route::kV2Ready;
  else if (path_ == "/metrics") route_ = Route::kMetrics;
  else if (path_ == "/healthz") route_ = Route::kHealthz;
  else if (path_ == "/readyz") route_ = Route::kReadyz;
  else return reject(404, "no route for " + path_);
  return 0;
}

bool Connection::AppendFunctionBody(const char* at, size_t len) {
  if (body_len_ + len > body_cap_) {
    const uint64_t need = body_len_ + len;
    if (need > body_limit_) return false;
    // Chunked bodies of unknown size grow by doubling (one copy per doubling).
    const uint64_t cap = std::min<uint64_t>(std::max<uint64_t>(need, body_cap_ * 2), body_limit_);
    auto bigger = fn_->pool->Allocate(head_len_ + cap, kShoaldSlot);
    if (!bigger.ok()) return false;
    std::byte* dst = fn_->pool->Data(*bigger).data() + head_len_;
    std::memcpy(dst, body_ptr_, body_len_);
    (void)fn_->pool->Release(buffer_, kShoaldSlot);
    buffer_ = *bigger;
    body_ptr_ = dst;
    body_cap_ = cap;
  }
  std::memcpy(body_ptr_ + body_len_, at, len);
  body_len_ += len;
  return true;
}

int Connection::OnBody(http_parser* p, const char* at, size_t len) {
  auto* c = static_cast<Connection*>(p->data);
  if (c->route_ == Route::kFunction) {
    if (!c->AppendFunctionBody(at, len)) {
      const bool over = c->body_len_ + len > c->body_limit_;
      c->ReleaseRequestBuffer();
      c->close_after_ = true;
      c->keep_alive_ = false;
      c->SetError(over ? 413 : 503,
                  over ? "chunked request body over the limit of " +
                             std::to_string(c->body_limit_) + " bytes"
                       : "shared-memory pool is full: retry later",
                  !over);
      c->message_done_ = true;
      http_parser_pause(p, 1);
    }
    return 0;
  }
  if (c->route_ == Route::kControl) {
    if (c->small_body_.size() + len > c->body_limit_) {
      c->close_after_ = true;
      c->keep_alive_ = false;
      c->SetError(413, "request body over the limit");
      c->message_done_ = true;
      http_parser_pause(p, 1);
      return 0;
    }
    c->small_body_.append(at, len);
  }
  return 0;
}

int Connection::OnMessageComplete(http_parser* p) {
  auto* c = static_cast<Connection*>(p->data);
  c->message_done_ = true;
  http_parser_pause(p, 1);  // one request at a time; the rest waits in the read buffer
  return 0;
}

void Connection::ReleaseRequestBuffer() {
  if (buffer_ != 0 && fn_) (void)fn_->pool->Release(buffer_, kShoaldSlot);
  buffer_ = 0;
}

// ---- Connection: answering -----------------------------------------------------------------

void Connection::HandleRequest() {
  state_ = State::kBusy;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
  switch (route_) {
    case Route::kFunction: {
      std::span<std::byte> buf = fn_->pool->Data(buffer_);
      WritePayloadHead(buf, static_cast<uint16_t>(parser_.method), 0, sub_path_, query_,
                       content_type_, body_len_);
      FlAdmission admission;
      if (!fl_job_.empty()) {
        // The coordinator checks the update's header before any leaf touches it.
        auto adm = loop_.gw().hooks_.fl->Admit(
            fl_job_, *fn_->pool, std::span<const std::byte>(body_ptr_, body_len_), buffer_);
        if (!adm.ok()) {
          ReleaseRequestBuffer();
          const int status = adm.status().code() == StatusCode::kAlreadyExists
                                 ? 409
                                 : HttpStatusFor(adm.status().code());
          WriteError(status, adm.status().message());
          return;
        }
        admission = *adm;
      }
      const uint64_t buffer = buffer_;
      buffer_ = 0;  // the pending request owns it now
      loop_.Dispatch(this, fn_, buffer, head_len_ + body_len_, admission);
      return;
    }
    case Route::kControl: {
      ServiceReply r = loop_.gw().hooks_.control->Handle(
          http_method_str(static_cast<http_method>(parser_.method)), path_, query_, small_body_,
          principal_);
      WriteReply(r.status, r.content_type, std::move(r.body), r.headers, std::move(r.shared_body));
      return;
    }
    case Route::kMetrics: {
      auto& hooks = loop_.gw().hooks_;
      WriteReply(200, "text/plain; version=0.0.4",
                 hooks.metrics_text ? hooks.metrics_text() : std::string());
      return;
    }
    case Route::kHealthz:
      WriteReply(200, "text/plain", "ok\n");
      return;
    case Route::kReadyz: {
      auto& hooks = loop_.gw().hooks_;
      const bool ready = !hooks.ready || hooks.ready();
      WriteReply(ready ? 200 : 503, "text/plain", ready ? "ready\n" : "not ready\n");
      return;
    }
    case Route::kV2Server:
      WriteReply(200, "application/json",
                 "{\"name\":\"shoal\",\"version\":\"" SHOAL_VERSION_STRING
                 "\",\"extensions\":[\"binary_tensor_data\"]}\n");
      return;
    case Route::kV2Live:
      WriteReply(200, "application/json", "{\"live\":true}\n");
      return;
    case Route::kV2Ready: {
      auto& hooks = loop_.gw().hooks_;
      const bool ready = !hooks.ready || hooks.ready();
      WriteReply(ready ? 200 : 503, "application/json",
                 ready ? "{\"ready\":true}\n" : "{\"ready\":false}\n");
      return;
    }
    case Route::kError:
      WriteError(error_status_, error_message_, error_retry_after_);
      return;
    case Route::kNone:
      WriteError(400, "empty request");
      return;
  }
}

void Connection::WriteError(int status, std::string_view message, bool retry_after) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (retry_after) headers.emplace_back("Retry-After", "1");
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer realm=\"shoal\"");
  WriteReply(status, "application/json", JsonError(message), headers);
}

void Connection::RecordFunctionStats(FunctionRuntime& fn, int status) {
  const uint64_t now = NowNs();
  const double secs = static_cast<double>(now - start_ns_) / 1e9;
  fn.metrics.CountRequest(status, secs);
  fn.latency.Record(now / 1000000000ull, secs * 1e6);
  fn.requests_total.fetch_add(1, std::memory_order_relaxed);
  if (status >= 500) fn.errors_total.fetch_add(1, std::memory_order_relaxed);
}

void Connection::WriteReply(int status, std::string_view content_type, std::string body,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            std::shared_ptr<const std::string> shared) {
  if (route_ == Route::kFunction && fn_) RecordFunctionStats(*fn_, status);
  if (route_ == Route::kError && fn_) RecordFunctionStats(*fn_, status);
  resp_body_ = std::move(body);
  resp_shared_ = std::move(shared);
  // uv_write only reads the body: the shared bytes are sent as they are.
  char* const body_data =
      resp_shared_ ? const_cast<char*>(resp_shared_->data()) : resp_body_.data();
  const size_t body_size = resp_shared_ ? resp_shared_->size() : resp_body_.size();
  resp_head_.clear();
  resp_head_ += "HTTP/1.1 ";
  resp_head_ += std::to_string(status);
  resp_head_ += ' ';
  resp_head_ += HttpReason(status);
  resp_head_ += "\r\nContent-Type: ";
  resp_head_ += content_type;
  resp_head_ += "\r\nContent-Length: ";
  resp_head_ += std::to_string(body_size);
  for (const auto& [k, v] : headers) {
    resp_head_ += "\r\n" + k + ": " + v;
  }
  resp_head_ += keep_alive_ && !close_after_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  uv_buf_t bufs[2] = {uv_buf_init(resp_head_.data(), static_cast<unsigned>(resp_head_.size())),
                      uv_buf_init(body_data, static_cast<unsigned>(body_size))};
  writing_ = true;
  if (uv_write(&write_req_, reinterpret_cast<uv_stream_t*>(&tcp_), bufs, body_size == 0 ? 1 : 2,
               &Connection::OnWritten) != 0) {
    writing_ = false;
    Close();
  }
}

void Connection::WriteFunctionResponse(const EventDescriptor& d,
                                       const std::shared_ptr<FunctionRuntime>& fn) {
  if (d.kind != static_cast<uint16_t>(EventKind::kResponse)) {
    const int status = d.status >= 400 && d.status < 600 ? static_cast<int>(d.status) : 500;
    WriteError(status, status == 503 ? "function '" + fn->spec.name +
                                           "': shared-memory pool full while answering; retry"
                                     : "function '" + fn->spec.name + "' failed to run the request",
               status == 503);
    return;
  }
  PayloadView v = ReadPayload(fn->pool->Data(d.offset));
  if (!v.valid || d.length > fn->pool->Data(d.offset).size()) {
    (void)fn->pool->Release(d.offset, kShoaldSlot);
    WriteError(502, "function '" + fn->spec.name + "' sent a malformed response");
    return;
  }
  const int status = v.status ? v.status : 200;
  RecordFunctionStats(*fn, status);
  resp_head_.clear();
  resp_head_ += "HTTP/1.1 ";
  resp_head_ += std::to_string(status);
  resp_head_ += ' ';
  resp_head_ += HttpReason(status);
  resp_head_ += "\r\nContent-Type: ";
  std::string_view content_type =
      v.content_type.empty() ? std::string_view("application/octet-stream") : v.content_type;
  // An inference handler answering with the OIP binary extension names the JSON header's length
  // as a content-type parameter; HTTP clients expect it as its own header.
  static constexpr std::string_view kInferHeader = "; inference-header-content-length=";
  std::string_view infer_header_length;
  if (const auto p = content_type.find(kInferHeader); p != std::string_view::npos) {
    infer_header_length = content_type.substr(p + kInferHeader.size());
    content_type = content_type.substr(0, p);
  }
  resp_head_.append(content_type);
  resp_head_ += "\r\nContent-Length: ";
  resp_head_ += std::to_string(v.body.size());
  if (!infer_header_length.empty()) {
    resp_head_ += "\r\nInference-Header-Content-Length: ";
    resp_head_.append(infer_header_length);
  }
  resp_head_ += keep_alive_ && !close_after_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  // The body goes from the pool to the socket: no copy in user space.
  resp_buffer_ = d.offset;
  resp_fn_ = fn;
  uv_buf_t bufs[2] = {
      uv_buf_init(resp_head_.data(), static_cast<unsigned>(resp_head_.size())),
      uv_buf_init(reinterpret_cast<char*>(v.body.data()), static_cast<unsigned>(v.body.size()))};
  writing_ = true;
  if (uv_write(&write_req_, reinterpret_cast<uv_stream_t*>(&tcp_), bufs, v.body.empty() ? 1 : 2,
               &Connection::OnWritten) != 0) {
    writing_ = false;
    AfterWrite();
    Close();
  }
}

void Connection::OnWritten(uv_write_t* req, int status) {
  auto* c = static_cast<Connection*>(req->data);
  c->writing_ = false;
  c->AfterWrite();
  if (status != 0 || c->close_after_ || !c->keep_alive_ || c->state_ == State::kClosing) {
    c->Close();
    return;
  }
  c->state_ = State::kHeaders;
  c->fn_.reset();
  c->resp_body_.clear();
  c->resp_shared_.reset();
  if (c->rbuf_len_ > 0) c->Consume();  // a pipelined request already arrived
  if (c->state_ == State::kHeaders || c->state_ == State::kBody) c->StartReading();
}

void Connection::AfterWrite() {
  if (resp_buffer_ != 0 && resp_fn_) (void)resp_fn_->pool->Release(resp_buffer_, kShoaldSlot);
  resp_buffer_ = 0;
  resp_fn_.reset();
}

void Connection::OnTimeoutFired() {
  if (!has_pending_) return;
  has_pending_ = false;
  const std::string name = fn_ ? fn_->spec.name : std::string("?");
  const double timeout = fn_ ? fn_->spec.timeout_s : 0;
  loop_.Abandon(pending_idx_);
  char msg[256];
  std::snprintf(msg, sizeof msg, "function '%s' did not answer within %.3g s", name.c_str(),
                timeout);
  WriteError(504, msg);
}

void Connection::Close() {
  if (state_ == State::kClosing) return;
  if (writing_) {  // finish the write first; OnWritten closes
    close_after_ = true;
    return;
  }
  state_ = State::kClosing;
  if (has_pending_) {
    has_pending_ = false;
    loop_.Abandon(pending_idx_);
  }
  ReleaseRequestBuffer();
  AfterWrite();
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), &Connection::OnClosed);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), &Connection::OnClosed);
}

void Connection::OnClosed(uv_handle_t* h) {
  auto* c = static_cast<Connection*>(h->data);
  if (--c->open_handles_ == 0) {
    c->loop_.OnConnectionClosed(c);
    delete c;
  }
}

// ---- GatewayLoop ---------------------------------------------------------------------------

GatewayLoop::~GatewayLoop() {
  if (thread_.joinable()) thread_.join();
  if (initialised_) uv_loop_close(&loop_);
}

Status GatewayLoop::Init(int listen_fd, Endpoint endpoint) {
  uv_loop_init(&loop_);
  initialised_ = true;
  loop_.data = this;
  uv_tcp_init(&loop_, &listener_);
  listener_.data = this;
  if (int rc = uv_tcp_open(&listener_, listen_fd); rc != 0) {
    return Internal(std::string("uv_tcp_open: ") + uv_strerror(rc));
  }
  int rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 1024, [](uv_stream_t* s, int status) {
    auto* self = static_cast<GatewayLoop*>(s->data);
    if (status != 0) return;
    auto* c = new Connection(*self);
    if (!c->Accept(s)) {
      c->Close();
      return;
    }
    self->connections_.push_back(c);
    c->StartReading();
  });
  if (rc != 0) return Internal(std::string("listen: ") + uv_strerror(rc));

  endpoint_ = std::move(endpoint);
  auto kind = gw_.dataplane_.kind();
  channel_ = OpenChannel(endpoint_.ReleaseFd(), kind, gw_.config_.node_name);
  uv_poll_init(&loop_, &channel_poll_, channel_->fd());
  channel_poll_.data = this;
  uv_poll_start(&channel_poll_, UV_READABLE, [](uv_poll_t* h, int, int) {
    static_cast<GatewayLoop*>(h->data)->OnChannelReadable();
  });
  uv_async_init(&loop_, &inbox_async_, [](uv_async_t* a) {
    static_cast<GatewayLoop*>(a->data)->OnInbox();
  });
  inbox_async_.data = this;
  uv_async_init(&loop_, &stop_async_, [](uv_async_t* a) {
    auto* self = static_cast<GatewayLoop*>(a->data);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->listener_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->channel_poll_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->inbox_async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->stop_async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->retry_timer_), nullptr);
    auto conns = self->connections_;
    for (Connection* c : conns) c->Close();
  });
  stop_async_.data = this;
  uv_timer_init(&loop_, &retry_timer_);
  retry_timer_.data = this;
  pending_.reserve(1024);
  return {};
}

void GatewayLoop::Run() {
  uv_run(&loop_, UV_RUN_DEFAULT);
  // Answer nothing more: in-flight requests' buffers are reclaimed with the pool.
}

void GatewayLoop::Stop() {
  if (!initialised_) return;
  uv_async_send(&stop_async_);
  if (thread_.joinable()) thread_.join();
}

void GatewayLoop::Post(InboxItem item) {
  {
    std::lock_guard lock(inbox_mu_);
    inbox_.push_back(std::move(item));
  }
  uv_async_send(&inbox_async_);
}

void GatewayLoop::OnConnectionClosed(Connection* conn) {
  auto it = std::find(connections_.begin(), connections_.end(), conn);
  if (it != connections_.end()) {
    *it = connections_.back();
    connections_.pop_back();
  }
}

uint32_t GatewayLoop::AllocPending() {
  uint32_t idx;
  if (!free_pending_.empty()) {
    idx = free_pending_.back();
    free_pending_.pop_back();
  } else {
    idx = static_cast<uint32_t>(pending_.size());
    pending_.emplace_back();
  }
  Pending& p = pending_[idx];
  p.in_use = true;
  ++p.gen;
  return idx;
}

void GatewayLoop::FinishFl(Pending& p, int status, bool leaf_answered) {
  if (p.fl_ticket == 0) return;
  gw_.hooks_.fl->Completed(p.fl_ticket, status, leaf_answered);
  p.fl_ticket = 0;
}

void GatewayLoop::FreePending(uint32_t idx) {
  Pending& p = pending_[idx];
  p.fl_ticket = 0;
  p.in_use = false;
  p.conn = nullptr;
  p.fn.reset();
  p.instance = 0;
  p.buffer = 0;
  p.queued = false;
  free_pending_.push_back(idx);
}

Pending* GatewayLoop::Lookup(uint64_t request_id, uint32_t* idx) {
  *idx = static_cast<uint32_t>(request_id & 0xFFFFFFFFu);
  const auto gen = static_cast<uint32_t>(request_id >> 32);
  if (*idx >= pending_.size()) return nullptr;
  Pending& p = pending_[*idx];
  if (!p.in_use || p.gen != gen) return nullptr;
  return &p;
}

void GatewayLoop::Dispatch(Connection* conn, std::shared_ptr<FunctionRuntime> fn, uint64_t buffer,
                           uint64_t length, FlAdmission fl) {
  const uint32_t idx = AllocPending();
  Pending& p = pending_[idx];
  p.conn = conn;
  p.fl_ticket = fl.ticket;
  p.fl_weight = fl.coefficient;
  p.fn = std::move(fn);
  p.buffer = buffer;
  p.length = length;
  conn->SetPending(idx);
  FunctionRuntime& f = *p.fn;
  const auto timeout_ms = static_cast<uint64_t>(f.spec.timeout_s * 1000.0);
  uv_timer_start(conn->timer(), [](uv_timer_t* t) {
    static_cast<Connection*>(t->data)->OnTimeoutFired();
  }, timeout_ms ? timeout_ms : 1, 0);
  const uint64_t request_id = (uint64_t{p.gen} << 32) | idx;
  auto r = f.router.Acquire(index_, request_id);
  switch (r.outcome) {
    case FunctionRouter::Outcome::kAssigned:
      SendToInstance(idx, r.instance);
      return;
    case FunctionRouter::Outcome::kQueued:
      p.queued = true;
      gw_.scale_.Poke();
      return;
    case FunctionRouter::Outcome::kRejected: {
      FinishFl(p, 503);
      (void)f.pool->Release(buffer, kShoaldSlot);
      conn->ClearPending();
      FreePending(idx);
      gw_.metrics_.gateway_rejections.Add({{"reason", "queue_full"}}).Increment();
      conn->WriteError(503, "function '" + f.spec.name + "' has too many queued requests", true);
      return;
    }
  }
}

void GatewayLoop::SendToInstance(uint32_t idx, uint32_t instance) {
  Pending& p = pending_[idx];
  p.queued = false;
  p.instance = instance;
  FunctionRuntime& f = *p.fn;
  const HolderSlot slot = SlotOfInstance(instance);
  EventDescriptor d{};
  d.target = instance;
  d.version = kDescriptorVersion;
  d.kind = static_cast<uint16_t>(EventKind::kRequest);
  d.function_id = f.spec.id;
  d.source = GatewayEndpoint(index_);
  d.request_id = (uint64_t{p.gen} << 32) | idx;
  d.offset = p.buffer;
  d.length = p.length;
  d.timestamp_ns = NowNs();
  if (p.fl_ticket != 0) {
    auto partial = gw_.hooks_.fl->PartialFor(p.fl_ticket, instance);
    if (!partial.ok()) {
      spdlog::error("FL ticket {}: no partial sum: {}", p.fl_ticket, partial.status().ToString());
    } else {
      d.reserved = *partial;
      std::memcpy(&d.flags, &p.fl_weight, sizeof d.flags);
    }
  }
  // The instance holds the request from here on; if it dies, the pool reclaims it.
  if (Status st = f.pool->Transfer(p.buffer, kShoaldSlot, slot); !st.ok()) {
    spdlog::error("transfer to instance {:#x} failed: {}", instance, st.ToString());
  }
  Status st = channel_->Send(d);
  if (st.ok()) return;
  if (st.code() == StatusCode::kResourceExhausted) {
    outbox_.push_back(d);
    if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&retry_timer_))) {
      uv_timer_start(&retry_timer_, [](uv_timer_t* t) {
        static_cast<GatewayLoop*>(t->data)->FlushOutbox();
      }, 1, 1);
    }
    return;
  }
  // The instance is gone: take the buffer back and fail the request.
  FinishFl(p, 502);
  (void)f.pool->Transfer(p.buffer, slot, kShoaldSlot);
  (void)f.pool->Release(p.buffer, kShoaldSlot);
  if (auto next = f.router.Release(instance)) RouteAssignment(*next);
  Connection* conn = p.conn;
  auto fn = p.fn;
  FreePending(idx);
  if (conn) {
    conn->ClearPending();
    conn->WriteError(502, "instance of function '" + fn->spec.name + "' is unavailable: " +
                              st.message());
  }
}

void GatewayLoop::FlushOutbox() {
  while (!outbox_.empty()) {
    Status st = channel_->Send(outbox_.front());
    if (st.code() == StatusCode::kResourceExhausted) return;
    if (!st.ok()) {
      spdlog::warn("descriptor to {:#x} dropped after retry: {}", outbox_.front().target,
                   st.ToString());
      // The crash path (FailInstance) answers the request.
    }
    outbox_.pop_front();
  }
  uv_timer_stop(&retry_timer_);
}

void GatewayLoop::RouteAssignment(const shoal::RouteAssignment& a) {
  if (a.loop == index_) {
    InboxItem item{InboxItem::Kind::kAssign, a.request_id, a.instance, 0, {}};
    // Same loop: handle now, no hop.
    uint32_t idx;
    Pending* p = Lookup(item.request_id, &idx);
    if (p == nullptr || p->conn == nullptr || !p->queued) {
      // The waiter gave up meanwhile: pass the slot on.
      FunctionRuntime* fn = p ? p->fn.get() : nullptr;
      if (p != nullptr && p->conn == nullptr) {
        FinishFl(*p, 504);
        auto keep = p->fn;
        (void)keep->pool->Release(p->buffer, kShoaldSlot);
        FreePending(idx);
        if (auto next = keep->router.Release(a.instance)) RouteAssignment(*next);
        return;
      }
      (void)fn;
      spdlog::debug("assignment for unknown request {:#x}", a.request_id);
      return;
    }
    SendToInstance(idx, a.instance);
    return;
  }
  gw_.loops_[a.loop]->Post({InboxItem::Kind::kAssign, a.request_id, a.instance, 0, {}});
}

void GatewayLoop::Abandon(uint32_t idx) {
  Pending& p = pending_[idx];
  if (!p.in_use) return;
  if (p.queued && p.fn->router.CancelWaiter(index_, (uint64_t{p.gen} << 32) | idx)) {
    FinishFl(p, 504);
    (void)p.fn->pool->Release(p.buffer, kShoaldSlot);
    FreePending(idx);
    return;
  }
  p.conn = nullptr;  // an answer or an assignment is on its way: drop it when it comes
}

void GatewayLoop::OnChannelReadable() {
  std::array<EventDescriptor, kDescriptorBatch> batch;
  for (;;) {
    auto got = channel_->Receive(batch);
    if (!got.ok() || *got == 0) return;
    for (size_t i = 0; i < *got; ++i) OnResponse(batch[i]);
  }
}

void GatewayLoop::OnResponse(const EventDescriptor& d) {
  if (d.kind != static_cast<uint16_t>(EventKind::kResponse) &&
      d.kind != static_cast<uint16_t>(EventKind::kError)) {
    return;
  }
  uint32_t idx;
  Pending* p = Lookup(d.request_id, &idx);
  if (p == nullptr || p->queued || p->instance != d.source) {
    // Stale (already failed or timed out and reused): the response buffer is ours to free.
    // Its pool is the one of the function that sent it; find it by the instance's function id.
    for (const auto& fn : gw_.functions_.All()) {
      if (fn->spec.id == d.function_id && d.offset != 0) {
        (void)fn->pool->Release(d.offset, kShoaldSlot);
        break;
      }
    }
    return;
  }
  // A late answer to an abandoned FL update still counts: the leaf folded it.
  FinishFl(*p,
           d.kind == static_cast<uint16_t>(EventKind::kResponse) && d.offset != 0
               ? static_cast<int>(ReadPayload(p->fn->pool->Data(d.offset)).status)
               : static_cast<int>(d.status ? d.status : 500),
           /*leaf_answered=*/true);
  auto fn = std::move(p->fn);
  Connection* conn = p->conn;
  FreePending(idx);
  if (auto next = fn->router.Release(d.source)) RouteAssignment(*next);
  if (conn == nullptr) {
    if (d.offset != 0) (void)fn->pool->Release(d.offset, kShoaldSlot);
    return;
  }
  conn->ClearPending();
  conn->WriteFunctionResponse(d, fn);
}

void GatewayLoop::OnInbox() {
  {
    std::lock_guard lock(inbox_mu_);
    inbox_work_.swap(inbox_);
  }
  for (InboxItem& item : inbox_work_) {
    switch (item.kind) {
      case InboxItem::Kind::kAssign:
        RouteAssignment({index_, item.request_id, item.instance});
        break;
      case InboxItem::Kind::kReject:
        Reject(item.request_id, item.status, item.reason);
        break;
      case InboxItem::Kind::kFailInstance:
        FailInstance(item.instance, item.status, item.reason);
        break;
    }
  }
  inbox_work_.clear();
}

void GatewayLoop::Reject(uint64_t request_id, int status, const std::string& reason) {
  uint32_t idx;
  Pending* p = Lookup(request_id, &idx);
  if (p == nullptr) return;
  FinishFl(*p, status);
  (void)p->fn->pool->Release(p->buffer, kShoaldSlot);
  Connection* conn = p->conn;
  FreePending(idx);
  if (conn) {
    conn->ClearPending();
    conn->WriteError(status, reason, status == 503);
  }
}

void GatewayLoop::FailInstance(uint32_t instance, int status, const std::string& reason) {
  for (uint32_t idx = 0; idx < pending_.size(); ++idx) {
    Pending& p = pending_[idx];
    if (!p.in_use || p.queued || p.instance != instance) continue;
    // The request buffer was the instance's: the pool reclaims it with the instance's slot.
    FinishFl(p, status);
    Connection* conn = p.conn;
    FreePending(idx);
    if (conn) {
      conn->ClearPending();
      conn->WriteError(status, reason);
    }
  }
  // Descriptors for it still waiting to be sent are dropped with it.
  std::erase_if(outbox_, [&](const EventDescriptor& d) { return d.target == instance; });
}

// ---- Gateway -------------------------------------------------------------------------------

Gateway::Gateway(const NodeConfig& config, FunctionTable& functions, DataPlane& dataplane,
                 ScaleSignal& scale, NodeMetrics& metrics, GatewayHooks hooks)
    : config_(config),
      functions_(functions),
      dataplane_(dataplane),
      scale_(scale),
      metrics_(metrics),
      hooks_(std::move(hooks)) {}

Gateway::~Gateway() { Stop(); }

uint32_t Gateway::loops() const { return static_cast<uint32_t>(loops_.size()); }

namespace {

Result<int> BindListener(const std::string& host, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return InvalidArgument("listen_host: not an IPv4 address: " + host);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus("bind " + host + ":" + std::to_string(port), err);
  }
  return fd;
}

}  // namespace

Status Gateway::Start() {
  uint32_t n = config_.gateway_threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  uint16_t port = config_.listen_port;
  for (uint32_t i = 0; i < n; ++i) {
    auto fd = BindListener(config_.listen_host, port);
    if (!fd.ok()) return fd.status();
    if (port == 0) {
      sockaddr_in addr{};
      socklen_t len = sizeof addr;
      getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
      port = ntohs(addr.sin_port);
    }
    auto endpoint = dataplane_.CreateEndpoint(GatewayEndpoint(i));
    if (!endpoint.ok()) {
      close(*fd);
      return endpoint.status();
    }
    auto loop = std::make_unique<GatewayLoop>(*this, i);
    SHOAL_RETURN_IF_ERROR(loop->Init(*fd, std::move(*endpoint)));
    loops_.push_back(std::move(loop));
  }
  port_ = port;
  for (auto& loop : loops_) loop->Start();
  spdlog::info("gateway: listening on {}:{} with {} event loops (SO_REUSEPORT), data plane {}",
               config_.listen_host, port_, n, DataPlaneKindName(dataplane_.kind()));
  return {};
}

void Gateway::Stop() {
  for (auto& loop : loops_) loop->Stop();
  loops_.clear();
}

void Gateway::Deliver(const RouteAssignment& a) {
  if (a.loop < loops_.size()) {
    loops_[a.loop]->Post({InboxItem::Kind::kAssign, a.request_id, a.instance, 0, {}});
  }
}

void Gateway::Reject(uint32_t loop, uint64_t request_id, int http_status, std::string reason) {
  if (loop < loops_.size()) {
    loops_[loop]->Post({InboxItem::Kind::kReject, request_id, 0, http_status, std::move(reason)});
  }
}

void Gateway::FailInstance(uint32_t instance, int http_status, std::string reason) {
  for (auto& loop : loops_) {
    loop->Post({InboxItem::Kind::kFailInstance, 0, instance, http_status, reason});
  }
}

}  // namespace shoal
