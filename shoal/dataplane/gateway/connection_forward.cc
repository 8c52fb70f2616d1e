// Connection, cluster mode: a request for a function that runs on another node goes there over
// a pooled peer link (peer_links.h), its body streamed as it arrives, the answer relayed back.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "shoal/common/clock.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/gateway/connection.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/dataplane/gateway/gateway_loop.h"
#include "shoal/dataplane/gateway/response_head.h"
#include "shoal/dataplane/gateway/routes.h"

namespace shoal {

bool Connection::TryForward(const RequestHead& head, ForwardTable::Kind kind, std::string_view name,
                            bool* take_body) {
  ForwardTable* table = loop_.gw().hooks_.forward;
  // A request another node forwarded is never forwarded again (no loops between nodes whose
  // views of the placements differ for a moment).
  if (table == nullptr || !head.forwarded_by.empty() || name.empty()) return false;
  ForwardTarget target;
  if (!table->Pick(kind, name, &target)) return false;
  route_ = Route::kForward;
  function_name_ = kind == ForwardTable::Kind::kJob ? "fl." + std::string(name) : std::string(name);
  fwd_node_ = target.node;
  fwd_chunked_ = head.chunked;
  fwd_paused_ = false;
  // The head is rebuilt with the headers a gateway acts on; the body follows as it arrives.
  std::string req;
  req.reserve(256 + head.url.size() + head.authorization.size());
  req.append(head.method_name()).append(" ").append(head.url).append(" HTTP/1.1\r\nHost: ");
  req.append(target.address).append("\r\nX-Shoal-Forwarded-By: ").append(table->self());
  req.append("\r\n");
  auto header = [&req](std::string_view k, std::string_view v) {
    if (v.empty()) return;
    req.append(k).append(": ").append(v).append("\r\n");
  };
  header("Content-Type", head.content_type);
  header("Authorization", head.authorization);
  header("Inference-Header-Content-Length", head.inference_header_length);
  if (head.chunked) {
    req.append("Transfer-Encoding: chunked\r\n");
  } else {
    req.append("Content-Length: ").append(std::to_string(head.content_length)).append("\r\n");
  }
  // The link outlives this client: it stays open for the next request whatever this client
  // asked (a client that asked to close is closed after its answer).
  req.append("\r\n");
  fwd_ = loop_.peers().Acquire(target.node, target.address);
  fwd_->Begin(this, std::move(req), head.method == HTTP_HEAD);
  if (head.expect_continue && head.has_body()) SendContinue();
  *take_body = false;
  if (!head.chunked && head.content_length > 0) {
    // Like a pool-bound body, read outside the parser: Consume() and OnRead() pass it on.
    raw_body_ = true;
    body_len_ = 0;
    body_expected_ = head.content_length;
    *take_body = true;
  }
  return true;
}

void Connection::SendForwardBody(const char* data, size_t len) {
  if (fwd_ == nullptr) return;  // the forward failed: its answer is written, the body dropped
  if (!fwd_->Send(data, len) && !fwd_paused_) {
    // The peer has not taken everything yet: read no more of the client until it has.
    fwd_paused_ = true;
    StopReading();
  }
}

void Connection::OnForwardDrained() {
  if (!fwd_paused_) return;
  fwd_paused_ = false;
  if (state_ == State::kBody || state_ == State::kHeaders) StartReading();
}

void Connection::CountForward(const char* result) {
  loop_.gw()
      .metrics_.forwards
      .Add({{"function", function_name_}, {"node", fwd_node_}, {"result", result}})
      .Increment();
}

void Connection::OnForwardFailed(int http_status, std::string message) {
  fwd_ = nullptr;
  CountForward("failed");
  spdlog::warn("gateway: forwarding a request for '{}' to node '{}' failed: {}", function_name_,
               fwd_node_, message);
  if (state_ != State::kBusy) {
    // The client's body is not all read: this connection cannot carry another request.
    close_after_ = true;
    keep_alive_ = false;
    state_ = State::kBusy;
    StopReading();
  }
  route_ = Route::kError;
  WriteError(http_status,
             "'" + function_name_ + "' runs on another node and could not be " +
                 "reached there: " + message,
             http_status == 503);
}

void Connection::OnForwardDone(bool complete, int) {
  fwd_ = nullptr;
  CountForward(complete ? "ok" : "broken");
  if (!complete || state_ != State::kBusy) {
    // Broken midway, or answered before the client finished sending its body.
    close_after_ = true;
    Close();
    return;
  }
  NextRequest();
}

}  // namespace shoal
