// Connection: serving a whole request (dispatch to an instance, the control worker or a local
// route) and writing its answer, then the next request on the connection, or its close.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "shoal/common/buffer_release.h"
#include "shoal/common/clock.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/gateway/connection.h"
#include "shoal/dataplane/gateway/fl_tickets.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/dataplane/gateway/gateway_loop.h"
#include "shoal/dataplane/gateway/response_head.h"
#include "shoal/dataplane/gateway/routes.h"

namespace shoal {

// ---- answering -----------------------------------------------------------------------------

void Connection::HandleRequest() {
  // Reading goes on while the request is served: stopping and restarting it cost libuv two
  // epoll_ctl calls per request (a failing ADD, then a MOD). What arrives meanwhile (a
  // pipelined request) waits in the read buffer; a full buffer stops reading (OnRead).
  state_ = State::kBusy;
  auto& hooks = loop_.gw().hooks_;
  switch (route_) {
    case Route::kFunction:
      DispatchFunction();
      return;
    case Route::kForward:
      // The whole body has gone (or is queued) to the peer; its answer comes through the link.
      if (fwd_chunked_) SendForwardBody("0\r\n\r\n", 5);
      if (fwd_ != nullptr) fwd_->Flush();
      return;
    case Route::kControl: {
      // Off this loop: a join or an evaluation may touch files (control_worker.h).
      ControlCall call;
      call.method = parser_.head().method_name();
      call.path = std::move(path_);
      call.query = std::move(query_);
      call.body = std::move(small_body_);
      call.who = std::move(principal_);
      call.headers = parser_.head().service;
      loop_.CallControl(this, std::move(call));
      return;
    }
    case Route::kMetrics:
      WriteReply(200, "text/plain; version=0.0.4",
                 hooks.metrics_text ? hooks.metrics_text() : std::string());
      return;
    case Route::kHealthz:
      WriteReply(200, "text/plain", "ok\n");
      return;
    case Route::kReadyz: {
      const bool ready = !hooks.ready || hooks.ready();
      std::string body = ready ? "ready\n" : "not ready\n";
      if (hooks.ready_detail) body += hooks.ready_detail();
      WriteReply(ready ? 200 : 503, "text/plain", std::move(body));
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

void Connection::DispatchFunction() {
  WriteRequestPayloadHead(body_len_);
  FlAdmission admission;
  if (fl_.active()) {
    if (const std::optional<uint32_t> stream = fl_.stream()) {
      // Folded by its leaf while it arrived: the request (and the buffer) go to that leaf now.
      fl_.EndStream();
      buffer_ = 0;
      loop_.FinishBodyStream(*stream, head_len_ + body_len_);
      return;
    }
    if (fl_.lost()) {
      ReleaseRequestBuffer();
      WriteError(502,
                 "FL job '" + fl_.job() +
                     "': the leaf folding this update stopped while it arrived; send it again",
                 true);
      return;
    }
    if (fl_.admitted()) {
      // Admitted on its header before the body was whole: by its top on another node
      // (Connection::FeedFlHead), or here with no leaf free then (fl_update_ingest.h).
      admission = fl_.TakeAdmitted();
    } else {
      // The coordinator checks the update's header before any leaf touches it.
      const std::span<const std::byte> body(body_ptr_, body_len_);
      auto adm = loop_.gw().hooks_.fl->Admit(fl_.job(), *fn_->pool, body, buffer_);
      if (!adm.ok()) {
        ReleaseRequestBuffer();
        WriteError(FlAdmitErrorStatus(adm.status()), adm.status().message());
        return;
      }
      admission = *adm;
    }
  }
  const uint64_t buffer = buffer_;
  buffer_ = 0;  // the pending request owns it now
  loop_.Dispatch(this, fn_, buffer, head_len_ + body_len_, admission);
}

void Connection::WriteError(int status, std::string_view message, bool retry_after) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (retry_after) headers.emplace_back("Retry-After", "1");
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer realm=\"shoal\"");
  WriteReply(status, "application/json", JsonError(message), headers);
}

void Connection::RecordFunctionStats(FunctionRuntime& fn, int status) {
  const uint64_t now = MonotonicNs();
  const double secs = static_cast<double>(now - parser_.head().start_ns) / 1e9;
  fn.metrics.CountRequest(status, secs);
  fn.latency.Record(now / 1000000000ull, secs * 1e6);
  fn.requests_total.fetch_add(1, std::memory_order_relaxed);
  if (status >= 500) fn.errors_total.fetch_add(1, std::memory_order_relaxed);
}

void Connection::WriteReply(HttpReply reply) {
  WriteReply(reply.status, reply.content_type, std::move(reply.body), reply.headers,
             std::move(reply.shared_body));
}

void Connection::WriteReply(int status, std::string_view content_type, std::string body,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            std::shared_ptr<const std::string> shared) {
  if (streaming_) {
    // A streamed answer has sent its head: an error now can only end the connection.
    Close();
    return;
  }
  if ((route_ == Route::kFunction || route_ == Route::kError) && fn_) {
    RecordFunctionStats(*fn_, status);
  }
  resp_body_ = std::move(body);
  resp_shared_ = std::move(shared);
  const std::string_view body_view = resp_shared_ ? *resp_shared_ : resp_body_;
  ResponseHead head(resp_head_, status, content_type, body_view.size());
  for (const auto& [k, v] : headers) head.Header(k, v);
  head.Finish(keep_open());
  StartWrite(body_view);
}

void Connection::StartWrite(std::string_view body) {
  // Only read, never copied: pool or shared bytes are sent as they are.
  uv_buf_t bufs[2] = {
      uv_buf_init(resp_head_.data(), static_cast<unsigned>(resp_head_.size())),
      uv_buf_init(const_cast<char*>(body.data()), static_cast<unsigned>(body.size()))};
  unsigned nbufs = body.empty() ? 1 : 2;
  // First at once (one writev): an answer the socket takes whole needs no write request, and
  // libuv's completion of one re-arms the socket's epoll entry (an epoll_ctl per answer). Not
  // with a pipelined request waiting: NextRequest() would dispatch it from inside whatever
  // called this; the write request's callback takes it from the loop instead.
  const int sent =
      rbuf_len_ == 0 ? uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), bufs, nbufs) : UV_EAGAIN;
  if (sent < 0 && sent != UV_EAGAIN) {
    AfterWrite();
    Close();
    return;
  }
  size_t skip = sent > 0 ? static_cast<size_t>(sent) : 0;
  if (skip == resp_head_.size() + body.size()) {
    AfterWrite();
    NextRequest();
    return;
  }
  // The rest when the socket takes it.
  uv_buf_t* rest = bufs;
  while (skip >= rest->len) {
    skip -= rest->len;
    ++rest;
    --nbufs;
  }
  rest->base += skip;
  rest->len -= static_cast<unsigned>(skip);
  writing_ = true;
  if (uv_write(&write_req_, reinterpret_cast<uv_stream_t*>(&tcp_), rest, nbufs,
               &Connection::OnWritten) != 0) {
    writing_ = false;
    AfterWrite();
    Close();
  }
}

void Connection::WriteFunctionResponse(const EventDescriptor& d,
                                       const std::shared_ptr<FunctionRuntime>& fn) {
  if (streaming_) {
    EndStream(d, fn);
    return;
  }
  if (d.kind != static_cast<uint16_t>(EventKind::kResponse)) {
    const int status = d.status >= 400 && d.status < 600 ? static_cast<int>(d.status) : 500;
    WriteError(status,
               status == 503 ? "function '" + fn->spec.name +
                                   "': shared-memory pool full while answering; retry"
                             : "function '" + fn->spec.name + "' failed to run the request",
               status == 503);
    return;
  }
  PayloadView v = ReadPayload(fn->pool->Data(d.offset));
  if (!v.valid || d.length > fn->pool->Data(d.offset).size()) {
    ReleaseOrLog(*fn->pool, d.offset, kShoaldSlot, "malformed response", "function '{}'",
                 fn->spec.name);
    WriteError(502, "function '" + fn->spec.name + "' sent a malformed response");
    return;
  }
  const int status = v.status ? v.status : 200;
  RecordFunctionStats(*fn, status);
  // An inference handler answering with the OIP binary extension names the JSON header's length
  // as a content-type parameter; HTTP clients expect it as its own header.
  const SplitContentType ct = SplitInferenceHeaderLength(
      v.content_type.empty() ? std::string_view("application/octet-stream") : v.content_type);
  ResponseHead head(resp_head_, status, ct.type, v.body.size());
  if (!ct.inference_header_length.empty()) {
    head.Header("Inference-Header-Content-Length", ct.inference_header_length);
  }
  head.Finish(keep_open());
  // The body goes from the pool to the socket: no copy in user space.
  resp_buffer_ = d.offset;
  resp_fn_ = fn;
  StartWrite(std::string_view(reinterpret_cast<const char*>(v.body.data()), v.body.size()));
}

void Connection::OnWritten(uv_write_t* req, int status) {
  auto* c = static_cast<Connection*>(req->data);
  c->writing_ = false;
  if (c->streaming_) {
    c->OnStreamWritten(status);
    return;
  }
  c->AfterWrite();
  if (status != 0) {
    c->Close();
    return;
  }
  c->NextRequest();
}

void Connection::NextRequest() {
  if (fl_.discard() && state_ != State::kClosing && StartDiscard()) return;
  if (close_after_ || !keep_alive_ || state_ == State::kClosing) {
    Close();
    return;
  }
  state_ = State::kHeaders;
  fn_.reset();
  resp_body_.clear();
  resp_shared_.reset();
  if (rbuf_len_ > 0) Consume();  // a pipelined request already arrived
  if (state_ == State::kHeaders || state_ == State::kBody) {
    if (peer_shut_) {
      Close();  // nothing more can come
      return;
    }
    StartReading();
  }
}

void Connection::AfterWrite() {
  ReleaseBuffer(resp_fn_, resp_buffer_, "response");
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
  if (fwd_ != nullptr) {
    fwd_->Detach();
    fwd_ = nullptr;
  }
  if (const std::optional<uint32_t> stream = fl_.stream()) {
    // Its leaf folds it as it arrives: the leaf gets the buffer, drops what it folded and the
    // coordinator rebuilds the partial sum without it.
    has_pending_ = false;
    fl_.EndStream();
    buffer_ = 0;
    loop_.AbandonBodyStream(*stream);
  }
  if (has_pending_) {
    has_pending_ = false;
    loop_.Abandon(pending_idx_);
  }
  if (fl_.admitted()) {
    // Admitted on its header, its body not all read: it does not count; its client sends it
    // again.
    loop_.gw().hooks_.fl->Completed(fl_.TakeAdmitted().ticket, 503, false);
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

}  // namespace shoal
