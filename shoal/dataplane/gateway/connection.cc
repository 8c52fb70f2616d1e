#include "shoal/dataplane/gateway/connection.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "shoal/common/buffer_release.h"
#include "shoal/common/clock.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/dataplane/gateway/gateway_loop.h"
#include "shoal/dataplane/gateway/response_head.h"
#include "shoal/dataplane/gateway/routes.h"
#include "shoal/fl/wire/update_prefix.h"

namespace shoal {

namespace {
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
using model::kUpdatePrefixBytes;
}  // namespace

Connection::Connection(GatewayLoop& loop) : loop_(loop), parser_(*this) {
  rbuf_.reset(new char[kReadBufferBytes]);
  tcp_.data = this;
  timer_.data = this;
  write_req_.data = this;
}

bool Connection::Accept(uv_stream_t* server) {
  uv_tcp_init(loop_.uv(), &tcp_);
  uv_timer_init(loop_.uv(), &timer_);
  if (uv_accept(server, reinterpret_cast<uv_stream_t*>(&tcp_)) != 0) return false;
  uv_tcp_nodelay(&tcp_, 1);
  return true;
}

void Connection::StartReading() { reading_.Start(tcp_, &Connection::OnAlloc, &Connection::OnRead); }

void Connection::StopReading() { reading_.Stop(tcp_); }

// ---- reading -------------------------------------------------------------------------------

void Connection::OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
  auto* c = static_cast<Connection*>(h->data);
  if (c->state_ == State::kDiscard) {
    *buf = uv_buf_init(c->rbuf_.get(), static_cast<unsigned>(kReadBufferBytes));
    return;
  }
  if (c->state_ == State::kBody && c->route_ == Route::kForward) {
    // A forwarded body passes through the read buffer on its way to the peer.
    *buf = uv_buf_init(c->rbuf_.get(), static_cast<unsigned>(std::min<uint64_t>(
                                           c->body_expected_ - c->body_len_, kReadBufferBytes)));
    return;
  }
  if (c->state_ == State::kBody) {
    // The body of a Content-Length request goes straight into its pool buffer.
    *buf = uv_buf_init(reinterpret_cast<char*>(c->body_ptr_ + c->body_len_),
                       static_cast<unsigned>(
                           std::min<uint64_t>(c->body_expected_ - c->body_len_, kBodyReadBytes)));
    return;
  }
  *buf = uv_buf_init(c->rbuf_.get() + c->rbuf_len_,
                     static_cast<unsigned>(kReadBufferBytes - c->rbuf_len_));
}

void Connection::OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
  auto* c = static_cast<Connection*>(s->data);
  if (nread == UV_ENOBUFS && c->state_ == State::kBusy) {
    // Busy with a request and the read buffer full of the next ones: wait for the answer.
    c->StopReading();
    return;
  }
  if (nread == UV_EOF && c->state_ == State::kBusy) {
    // The client sent its request and shut its side: answer it (and any pipelined one already
    // read), then close.
    c->StopReading();
    c->peer_shut_ = true;
    return;
  }
  if (nread < 0) {
    c->Close();
    return;
  }
  if (nread == 0) return;
  if (c->state_ == State::kDiscard) {
    c->body_len_ += static_cast<uint64_t>(nread);
    if (c->body_len_ >= c->body_expected_) c->Close();
    return;
  }
  if (c->state_ == State::kBody) {
    c->body_len_ += static_cast<uint64_t>(nread);
    if (c->route_ == Route::kForward)
      c->SendForwardBody(c->rbuf_.get(), static_cast<size_t>(nread));
    if (c->body_len_ == c->body_expected_) {
      c->state_ = State::kHeaders;
      c->HandleRequest();
      return;
    }
    c->OnFlBodyProgress();
    return;
  }
  c->rbuf_len_ += static_cast<size_t>(nread);
  if (c->state_ == State::kFlHead) {
    c->FeedFlHead();
    return;
  }
  if (c->state_ == State::kBusy) return;  // the next request: parsed once this one is answered
  c->Consume();
}

void Connection::Consume() {
  size_t pos = 0;
  while (pos < rbuf_len_ && state_ == State::kHeaders) {
    const auto step = parser_.Execute(rbuf_.get() + pos, rbuf_len_ - pos);
    if (step.outcome == HttpRequestParser::Step::Outcome::kError) {
      rbuf_len_ = 0;
      keep_alive_ = false;
      close_after_ = true;
      state_ = State::kBusy;
      StopReading();
      WriteError(step.error_status, std::string("malformed HTTP request: ") + step.error);
      return;
    }
    pos += step.consumed;
    if (step.outcome != HttpRequestParser::Step::Outcome::kMessage) continue;
    if (raw_body_ && fl_.reading_head()) {
      // An FL update for a top elsewhere: its header first, the body once the top admitted it.
      std::memmove(rbuf_.get(), rbuf_.get() + pos, rbuf_len_ - pos);
      rbuf_len_ -= pos;
      state_ = State::kFlHead;
      FeedFlHead();
      return;
    }
    if (raw_body_ && body_len_ < body_expected_) {
      // Body bytes that arrived with the headers: the only ones the gateway copies.
      const size_t take = std::min<uint64_t>(rbuf_len_ - pos, body_expected_ - body_len_);
      if (route_ == Route::kForward) {
        SendForwardBody(rbuf_.get() + pos, take);
      } else {
        std::memcpy(body_ptr_ + body_len_, rbuf_.get() + pos, take);
      }
      body_len_ += take;
      pos += take;
      if (body_len_ < body_expected_) {
        state_ = State::kBody;
        OnFlBodyProgress();
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

void Connection::OnBegin() {
  route_ = Route::kNone;
  fn_.reset();
  buffer_ = 0;
  body_ptr_ = nullptr;
  body_cap_ = body_len_ = body_expected_ = 0;
  raw_body_ = false;
  small_body_.clear();
  error_status_ = 0;
  fl_.Reset();
}

bool Connection::OnHead(const RequestHead& head) {
  keep_alive_ = head.keep_alive;
  return RouteRequest(head);
}

bool Connection::Reject(int status, std::string message, bool retry_after) {
  SetError(status, std::move(message), retry_after);
  if (parser_.head().has_body()) {
    // The body is not read: the connection closes after the answer.
    close_after_ = true;
    keep_alive_ = false;
    return true;
  }
  return false;
}

// 401 without a valid bearer token (principal_ is set otherwise).
bool Connection::Authenticate(const RequestHead& head) {
  auth::TokenStore* tokens = loop_.gw().hooks_.tokens;
  if (tokens == nullptr) {
    Reject(503, "this node has no token store: authenticated routes are unavailable");
    return false;
  }
  const std::string_view bearer = auth::BearerToken(head.authorization);
  auto who = bearer.empty() ? Result<auth::Principal>(Unauthenticated(
                                  "authentication required: send 'Authorization: Bearer <token>'"))
                            : tokens->Authenticate(bearer);
  if (!who.ok()) {
    loop_.gw().metrics_.gateway_rejections.Add({{"reason", "unauthenticated"}}).Increment();
    Reject(401, who.status().message());
    return false;
  }
  principal_ = std::move(*who);
  return true;
}

// Adds 403 to Authenticate when the token's role may not take `action` on `ns`/`job`.
bool Connection::Authorize(const RequestHead& head, auth::Action action, std::string_view ns,
                           std::string_view job) {
  if (!Authenticate(head)) return false;
  if (Status st = auth::Authorize(principal_, action, ns, job); !st.ok()) {
    loop_.gw().metrics_.gateway_rejections.Add({{"reason", "forbidden"}}).Increment();
    Reject(403, st.message());
    return false;
  }
  return true;
}

void Connection::SendContinue() {
  uv_buf_t b = uv_buf_init(const_cast<char*>(kContinue), sizeof kContinue - 1);
  uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), &b, 1);
}

bool Connection::RouteRequest(const RequestHead& head) {
  const bool has_body = head.has_body();
  const auto qpos = head.url.find('?');
  path_.assign(head.url, 0, qpos);
  if (qpos == std::string::npos)
    query_.clear();
  else
    query_.assign(head.url, qpos + 1);
  Gateway& gw = loop_.gw();
  FlDataPath* fl = gw.hooks_.fl;
  const RouteMatch m = MatchRoute(head.method_name(), path_, fl != nullptr);
  auto not_found = [&](std::string_view what, std::string_view name) {
    std::string msg(what);
    msg += " '";
    msg += name;
    msg += "' not found";
    return Reject(404, std::move(msg));
  };
  // fn_, looked up by function or model name: one this node lacks may run on another node
  // (cluster mode). Before any pool memory is taken: a function with `auth: token` needs a token
  // that may invoke it.
  auto call_function = [&](ForwardTable::Kind kind, std::string_view what) {
    if (!fn_ || fn_->retired.load(std::memory_order_relaxed)) {
      fn_.reset();
      bool take_body = false;
      if (TryForward(head, kind, m.name, &take_body)) return take_body;
      return not_found(what, m.name);
    }
    if (kind == ForwardTable::Kind::kModel) function_name_ = fn_->spec.name;
    if (fn_->spec.require_token && !Authorize(head, auth::Action::kInvoke, fn_->spec.tenant, {})) {
      fn_.reset();
      return has_body;
    }
    return PrepareFunctionBody(head);
  };
  switch (m.kind) {
    case RouteKind::kModel:
      // Open Inference Protocol: /v2/models/{model}[/versions/{v}][/infer|/ready] goes to the
      // function serving that model, exactly like /fn/{function}[/sub/path].
      sub_path_ = m.sub_path;
      fn_ = m.name.empty() ? nullptr : gw.functions_.FindModel(m.name);
      return call_function(ForwardTable::Kind::kModel, "model");
    case RouteKind::kInternalFunction:
      // Internal functions (FL leaves, "fl.<job>") take requests only through their route.
      function_name_ = m.name;
      return not_found("function", m.name);
    case RouteKind::kFunction:
      function_name_ = m.name;
      sub_path_ = m.sub_path;
      fn_ = gw.functions_.Find(function_name_);
      return call_function(ForwardTable::Kind::kFunction, "function");
    case RouteKind::kFlUpdate:
      fl_.Begin(std::string(m.job), {});
      function_name_ = fl->LeafFunction(fl_.job());
      sub_path_.clear();
      fn_ = gw.functions_.Find(function_name_);
      if (!fn_ || fn_->retired.load(std::memory_order_relaxed)) {
        fn_.reset();
        // Cluster mode: the job runs on another node, whose tokens authenticate the update.
        bool take_body = false;
        if (TryForward(head, ForwardTable::Kind::kJob, m.job, &take_body)) return take_body;
        if (!Authenticate(head)) return has_body;
        return not_found("FL job", fl_.job());
      }
      if (fl->FoldsForOtherNode(fl_.job())) {
        // Folded here for a top on another node, which holds the job's tokens: it authenticates
        // the bearer token with the update's small admit request (AdmitForTop).
        fl_.Begin(std::string(m.job), std::string(auth::BearerToken(head.authorization)));
        if (!fl_.for_other_top()) {
          fn_.reset();
          loop_.gw().metrics_.gateway_rejections.Add({{"reason", "unauthenticated"}}).Increment();
          Reject(401, "authentication required: send 'Authorization: Bearer <token>'");
          return has_body;
        }
        return PrepareMemberUpdate(head);
      }
      // An update needs the job's FL client token (or a deployer's of its namespace).
      if (!Authorize(head, auth::Action::kFlClient, fn_->spec.tenant, fl_.job())) {
        fn_.reset();
        return has_body;
      }
      return PrepareFunctionBody(head);
    case RouteKind::kFleet: {
      // Cluster mode: a job this node does not run goes to the node that does (its tokens
      // authenticate the request there).
      auto leaf = fl != nullptr ? gw.functions_.Find(fl->LeafFunction(m.job)) : nullptr;
      if (!leaf || leaf->retired.load(std::memory_order_relaxed) || fl->FoldsForOtherNode(m.job)) {
        bool take_body = false;
        if (TryForward(head, ForwardTable::Kind::kJob, m.job, &take_body)) return take_body;
      }
    }
      if (gw.hooks_.control == nullptr) return Reject(404, "no FL jobs on this node");
      // The control API knows the job's namespace and checks the token's role (403 there).
      if (!Authenticate(head)) return has_body;
      route_ = Route::kControl;
      body_limit_ = loop_.config().max_body_bytes;
      if (head.content_length > body_limit_) return Reject(413, "request body over the limit");
      if (head.expect_continue && has_body) SendContinue();
      return false;
    case RouteKind::kFlowerFleet:
      // A SuperNode sends no bearer token: the Fleet API's own rules (a node id bound to one
      // job at registration) decide what it reaches, on a control thread as the fleet routes.
      if (gw.hooks_.control == nullptr) return Reject(404, "no FL jobs on this node");
      route_ = Route::kControl;
      principal_ = {};
      body_limit_ = loop_.config().max_body_bytes;
      if (head.content_length > body_limit_) return Reject(413, "request body over the limit");
      if (head.expect_continue && has_body) SendContinue();
      return false;
    case RouteKind::kControlElsewhere:
      return Reject(404,
                    "the control API is not served on this listener: use the control "
                    "address (control_listen_host:control_port, loopback by default)");
    // The routes answered here, one a line.
    // clang-format off
    case RouteKind::kV2Server: route_ = Route::kV2Server; return false;
    case RouteKind::kV2Live: route_ = Route::kV2Live; return false;
    case RouteKind::kV2Ready: route_ = Route::kV2Ready; return false;
    case RouteKind::kMetrics: route_ = Route::kMetrics; return false;
    case RouteKind::kHealthz: route_ = Route::kHealthz; return false;
    case RouteKind::kReadyz: route_ = Route::kReadyz; return false;
    case RouteKind::kNotFound: break;
      // clang-format on
  }
  return Reject(404, "no route for " + path_);
}

bool Connection::PrepareFunctionBody(const RequestHead& head) {
  route_ = Route::kFunction;
  // The OIP binary extension's header length and the body's Content-Encoding (the inference
  // handler inflates gzip and deflate) reach the handler in the query; a value that is not a
  // plain token goes as "invalid", so that it cannot add parameters of its own.
  auto pass = [&](std::string_view key, const std::string& value) {
    if (value.empty()) return;
    const bool token = std::all_of(value.begin(), value.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!query_.empty()) query_ += '&';
    query_ += key;
    query_ += '=';
    query_ += token ? std::string_view(value) : std::string_view("invalid");
  };
  pass("inference_header_content_length", head.inference_header_length);
  pass("content_encoding", head.content_encoding);
  const uint64_t content_length = head.content_length;
  if (auto rejected = RejectOverBodyLimit(content_length)) return *rejected;
  head_len_ = PayloadBodyOffset(sub_path_.size(), query_.size(), head.content_type.size());
  body_cap_ = head.chunked ? std::min<uint64_t>(kChunkedInitialBytes, body_limit_) : content_length;
  auto buf = fn_->pool->Allocate(head_len_ + body_cap_, kShoaldSlot);
  if (!buf.ok()) {
    loop_.gw().metrics_.gateway_rejections.Add({{"reason", "pool_full"}}).Increment();
    return Reject(
        503, "shared-memory pool of tenant '" + fn_->spec.tenant + "' is full: retry later", true);
  }
  buffer_ = *buf;
  body_ptr_ = fn_->pool->Data(buffer_).data() + head_len_;
  if (!head.chunked && content_length > 0) {
    raw_body_ = true;
    body_expected_ = content_length;
    // An FL update's leaf may read the buffer before the body is whole (fl_update_ingest.h).
    if (fl_.active()) WriteRequestPayloadHead(content_length);
    if (head.expect_continue) SendContinue();
    return true;  // the parser skips the body; Consume() and OnRead() put it in the pool
  }
  return false;
}

void Connection::WriteRequestPayloadHead(uint64_t body_len) {
  const RequestHead& head = parser_.head();
  WritePayloadHead(fn_->pool->Data(buffer_), static_cast<uint16_t>(head.method), 0, sub_path_,
                   query_, head.content_type, body_len);
}

void Connection::OnFlBodyProgress() {
  if (!fl_.active() || route_ != Route::kFunction || buffer_ == 0) return;
  fl_.OnBodyProgress(loop_, this, *loop_.gw().hooks_.fl, fn_, buffer_, head_len_,
                     std::span<const std::byte>(body_ptr_, body_expected_), body_len_);
}

void Connection::OnFlStreamLost() {
  has_pending_ = false;
  fl_.StreamLost();
}

std::optional<bool> Connection::RejectOverBodyLimit(uint64_t content_length) {
  body_limit_ = fn_->spec.max_body_bytes ? fn_->spec.max_body_bytes : loop_.config().max_body_bytes;
  if (content_length <= body_limit_) return std::nullopt;
  return Reject(413, "request body of " + std::to_string(content_length) +
                         " bytes is over the limit of " + std::to_string(body_limit_) +
                         " bytes for function '" + function_name_ + "'");
}

bool Connection::PrepareMemberUpdate(const RequestHead& head) {
  route_ = Route::kFunction;
  const uint64_t content_length = head.content_length;
  if (auto rejected = RejectOverBodyLimit(content_length)) return *rejected;
  if (head.chunked) {
    return Reject(411, "FL job '" + fl_.job() +
                           "' is folded on this node for its top on another node: send the "
                           "update with a Content-Length (the top admits its header before "
                           "its body is read)");
  }
  if (content_length < kUpdatePrefixBytes) {
    return Reject(400, model::ParsePrefix({}, content_length).status().message());
  }
  // No pool memory yet: the header goes to fl_ (its head()), the top decides, then the body is
  // read.
  head_len_ = PayloadBodyOffset(sub_path_.size(), query_.size(), head.content_type.size());
  raw_body_ = true;
  body_expected_ = content_length;
  fl_.StartHead();
  if (head.expect_continue) SendContinue();
  return true;
}

void Connection::FeedFlHead() {
  const char* data = rbuf_.get();
  size_t left = rbuf_len_;
  std::string refusal;
  const FlUpdateIngest::HeadStep step = fl_.FeedHead(data, left, body_expected_, &refusal);
  std::memmove(rbuf_.get(), data, left);
  rbuf_len_ = left;
  if (step == FlUpdateIngest::HeadStep::kMore) {
    StartReading();
    return;
  }
  if (step == FlUpdateIngest::HeadStep::kRefused) {
    OnFlRefused(400, refusal);
    return;
  }
  // The whole header: reading stops (the client's body waits in its socket) until the top's
  // answer comes back through the loop (OnFlAdmitted / OnFlRefused).
  StopReading();
  state_ = State::kBusy;
  loop_.AdmitForTop(this, fn_, fl_.job(), fl_.head(), fl_.bearer());
}

void Connection::OnFlAdmitted(FlAdmission admission) {
  FlDataPath* fl = loop_.gw().hooks_.fl;
  auto buf = fn_->pool->Allocate(head_len_ + body_expected_, kShoaldSlot);
  Status held = buf.ok() ? Status::Ok() : buf.status();
  if (buf.ok()) {
    buffer_ = *buf;
    held = fl->HoldUpdate(admission.ticket, *fn_->pool, buffer_);
  }
  if (!held.ok()) {
    fl->Completed(admission.ticket, 503, false);
    ReleaseRequestBuffer();
    if (!buf.ok()) {
      loop_.gw().metrics_.gateway_rejections.Add({{"reason", "pool_full"}}).Increment();
      OnFlRefused(503,
                  "shared-memory pool of tenant '" + fn_->spec.tenant + "' is full: retry later",
                  true);
    } else {
      OnFlRefused(503,
                  "FL job '" + fl_.job() + "': the update's admission is gone: " + held.message() +
                      "; retry",
                  true);
    }
    return;
  }
  fl_.SetAdmitted(admission);
  body_ptr_ = fn_->pool->Data(buffer_).data() + head_len_;
  WriteRequestPayloadHead(body_expected_);
  const std::span<const std::byte> head = fl_.head();
  std::memcpy(body_ptr_, head.data(), head.size());
  body_len_ = head.size();
  // Body bytes that came with the header (in the read buffer), then the rest from the socket.
  const size_t take = std::min<uint64_t>(rbuf_len_, body_expected_ - body_len_);
  std::memcpy(body_ptr_ + body_len_, rbuf_.get(), take);
  std::memmove(rbuf_.get(), rbuf_.get() + take, rbuf_len_ - take);
  rbuf_len_ -= take;
  body_len_ += take;
  if (body_len_ == body_expected_) {
    HandleRequest();
    return;
  }
  state_ = State::kBody;
  OnFlBodyProgress();
  StartReading();
}

void Connection::OnFlRefused(int status, const std::string& reason, bool retry_after) {
  // The body was never read: the connection closes after the answer, once the rest of the body
  // has been dropped (StartDiscard).
  StopReading();
  state_ = State::kBusy;
  keep_alive_ = false;
  close_after_ = true;
  fl_.set_discard(true);
  WriteError(status, reason, retry_after);
}

bool Connection::StartDiscard() {
  fl_.set_discard(false);
  body_len_ = fl_.head().size() + rbuf_len_;
  rbuf_len_ = 0;
  if (body_len_ >= body_expected_ || peer_shut_) return false;
  state_ = State::kDiscard;
  // A client that stops sending is not waited for long.
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<Connection*>(t->data)->Close(); }, 5000, 0);
  StartReading();
  return true;
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
    ReleaseRequestBuffer();
    buffer_ = *bigger;
    body_ptr_ = dst;
    body_cap_ = cap;
  }
  std::memcpy(body_ptr_ + body_len_, at, len);
  body_len_ += len;
  return true;
}

bool Connection::OnBodyPiece(const char* at, size_t len) {
  if (route_ == Route::kFunction) {
    if (AppendFunctionBody(at, len)) return true;
    const bool over = body_len_ + len > body_limit_;
    ReleaseRequestBuffer();
    close_after_ = true;
    keep_alive_ = false;
    SetError(
        over ? 413 : 503,
        over ? "chunked request body over the limit of " + std::to_string(body_limit_) + " bytes"
             : "shared-memory pool is full: retry later",
        !over);
    return false;
  }
  if (route_ == Route::kForward) {
    // A chunked body goes on chunked: each piece as it was decoded.
    char size[24];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", len);
    SendForwardBody(size, static_cast<size_t>(n));
    SendForwardBody(at, len);
    SendForwardBody("\r\n", 2);
    return true;
  }
  if (route_ == Route::kControl) {
    if (small_body_.size() + len > body_limit_) {
      close_after_ = true;
      keep_alive_ = false;
      SetError(413, "request body over the limit");
      return false;
    }
    small_body_.append(at, len);
  }
  return true;
}

void Connection::ReleaseBuffer(const std::shared_ptr<FunctionRuntime>& fn, uint64_t& buffer,
                               const char* what) {
  if (buffer != 0 && fn) {
    ReleaseOrLog(*fn->pool, buffer, kShoaldSlot, what, "function '{}'", fn->spec.name);
  }
  buffer = 0;
}

void Connection::ReleaseRequestBuffer() { ReleaseBuffer(fn_, buffer_, "request"); }

}  // namespace shoal
