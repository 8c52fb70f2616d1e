#include "shoal/dataplane/gateway/peer_links.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "shoal/common/log.h"

namespace shoal {

namespace {

constexpr uint64_t kConnectTimeoutMs = 3000;

}  // namespace

PeerLink::PeerLink(PeerLinks& owner, uv_loop_t* loop, std::string node, std::string address)
    : owner_(owner), node_(std::move(node)), address_(std::move(address)) {
  rbuf_.reset(new char[kReadBytes]);
  uv_tcp_init(loop, &tcp_);
  uv_timer_init(loop, &timer_);
  open_handles_ = 2;
  tcp_.data = this;
  timer_.data = this;
  connect_req_.data = this;
  write_req_.data = this;
  relay_req_.data = this;
}

void PeerLink::Begin(ForwardClient* client, std::string head, bool no_body) {
  client_ = client;
  no_body_ = no_body;
  status_ = 0;
  answer_started_ = answer_done_ = false;
  peer_keep_alive_ = false;
  http_parser_init(&parser_, HTTP_RESPONSE);
  parser_.data = this;
  // The head waits for the first body bytes (Send) or the request's end (Flush), so that a
  // small request leaves in one write.
  queued_ = std::move(head);
  if (connected_) {
    state_ = State::kExchange;
    ArmAnswerTimer();
    return;
  }
  state_ = State::kConnecting;
  Connect();
}

void PeerLink::Connect() {
  // address_ is "a.b.c.d:port" (a node's advertised gateway).
  const size_t colon = address_.rfind(':');
  sockaddr_in addr{};
  const std::string host = colon == std::string::npos ? address_ : address_.substr(0, colon);
  const int port = colon == std::string::npos ? 0 : std::atoi(address_.c_str() + colon + 1);
  if (port <= 0 || port > 65535 || uv_ip4_addr(host.c_str(), port, &addr) != 0) {
    // Reported from the loop, never from inside the caller's Begin().
    status_ = -1;
    uv_timer_start(
        &timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<PeerLink*>(t->data);
          self->Fail(502, "node '" + self->node_ + "' has no usable gateway address '" +
                              self->address_ + "'");
        },
        0, 0);
    return;
  }
  uv_timer_start(
      &timer_,
      [](uv_timer_t* t) {
        auto* self = static_cast<PeerLink*>(t->data);
        if (self->state_ != State::kConnecting) return;
        self->Fail(502, "node '" + self->node_ + "' at " + self->address_ +
                            " did not accept a connection within 3 s");
      },
      kConnectTimeoutMs, 0);
  const int rc =
      uv_tcp_connect(&connect_req_, &tcp_, reinterpret_cast<const sockaddr*>(&addr),
                     [](uv_connect_t* req, int status) {
                       auto* self = static_cast<PeerLink*>(req->data);
                       if (self->state_ != State::kConnecting)
                         return;  // failed or closed meanwhile
                       uv_timer_stop(&self->timer_);
                       if (status < 0) {
                         self->Fail(502, "cannot reach node '" + self->node_ + "' at " +
                                             self->address_ + ": " + uv_strerror(status));
                         return;
                       }
                       self->connected_ = true;
                       self->state_ = State::kExchange;
                       self->ArmAnswerTimer();
                       uv_tcp_nodelay(&self->tcp_, 1);
                       self->StartReading();
                       self->StartWrite();
                     });
  if (rc != 0) {
    uv_timer_stop(&timer_);
    status_ = rc;
    uv_timer_start(
        &timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<PeerLink*>(t->data);
          self->Fail(502, "cannot connect to node '" + self->node_ + "' at " + self->address_ +
                              ": " + uv_strerror(self->status_));
        },
        0, 0);
  }
}

bool PeerLink::Send(const char* data, size_t len) {
  if (state_ == State::kClosing || len == 0) return true;
  if (state_ == State::kExchange) ArmAnswerTimer();  // the request is still coming
  if (connected_ && !write_in_flight_) {
    // Whatever waits (the head) and these bytes in one writev, straight from the caller's
    // buffer into the socket; only what it does not take is kept.
    uv_buf_t b[2] = {uv_buf_init(queued_.data(), static_cast<unsigned>(queued_.size())),
                     uv_buf_init(const_cast<char*>(data), static_cast<unsigned>(len))};
    const bool head = !queued_.empty();
    const int n =
        uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), head ? b : b + 1, head ? 2 : 1);
    size_t sent = n > 0 ? static_cast<size_t>(n) : 0;  // a hard error shows in uv_write's callback
    const size_t from_queue = std::min(sent, queued_.size());
    queued_.erase(0, from_queue);
    sent -= from_queue;
    if (queued_.empty() && sent == len) return true;
    queued_.append(data + sent, len - sent);
  } else {
    queued_.append(data, len);
  }
  StartWrite();
  return false;
}

void PeerLink::Flush() {
  if (state_ == State::kClosing) return;
  StartWrite();
}

void PeerLink::StartWrite() {
  if (!connected_ || write_in_flight_ || queued_.empty() || state_ == State::kClosing) return;
  writing_.swap(queued_);
  queued_.clear();
  uv_buf_t b = uv_buf_init(writing_.data(), static_cast<unsigned>(writing_.size()));
  write_in_flight_ = true;
  const int rc = uv_write(&write_req_, reinterpret_cast<uv_stream_t*>(&tcp_), &b, 1,
                          [](uv_write_t* req, int status) {
                            auto* self = static_cast<PeerLink*>(req->data);
                            self->write_in_flight_ = false;
                            self->writing_.clear();
                            if (self->state_ == State::kClosing) return;
                            if (status < 0) {
                              if (self->answer_started_) {
                                self->Finish(false);
                              } else {
                                self->Fail(502, "sending the request to node '" + self->node_ +
                                                    "' failed: " + uv_strerror(status));
                              }
                              return;
                            }
                            if (self->state_ == State::kExchange && !self->answer_done_)
                              self->ArmAnswerTimer();
                            if (!self->queued_.empty()) {
                              self->StartWrite();
                            } else if (self->client_ != nullptr) {
                              self->client_->OnForwardDrained();
                            }
                          });
  if (rc != 0) {
    write_in_flight_ = false;
    status_ = rc;
    uv_timer_start(
        &timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<PeerLink*>(t->data);
          self->Fail(502, "sending the request to node '" + self->node_ +
                              "' failed: " + uv_strerror(self->status_));
        },
        0, 0);
  }
}

int PeerLink::OnHeadersComplete(http_parser* p) {
  auto* self = static_cast<PeerLink*>(p->data);
  self->status_ = static_cast<int>(p->status_code);
  return self->no_body_ ? 1 : 0;  // 1: http_parser expects no body
}

int PeerLink::OnMessageComplete(http_parser* p) {
  auto* self = static_cast<PeerLink*>(p->data);
  self->answer_done_ = true;
  self->peer_keep_alive_ = http_should_keep_alive(p) != 0;
  http_parser_pause(p, 1);  // one answer per request: anything after it is not relayed
  return 0;
}

void PeerLink::ArmAnswerTimer() {
  uv_timer_start(
      &timer_,
      [](uv_timer_t* t) {
        auto* self = static_cast<PeerLink*>(t->data);
        if (self->state_ != State::kExchange) return;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.3g",
                      static_cast<double>(self->owner_.answer_timeout_ms_) / 1000);
        if (self->answer_started_) {
          self->Finish(false);
        } else {
          self->Fail(504, "node '" + self->node_ + "' at " + self->address_ + " sent nothing for " +
                              secs + " s (forward_timeout_s)");
        }
      },
      owner_.answer_timeout_ms_, 0);
}

void PeerLink::OnPeerData(size_t n) {
  if (!answer_done_) ArmAnswerTimer();  // the peer is alive: its answer may take longer
  static const http_parser_settings settings = [] {
    http_parser_settings x{};
    x.on_headers_complete = &PeerLink::OnHeadersComplete;
    x.on_message_complete = &PeerLink::OnMessageComplete;
    return x;
  }();
  const size_t parsed = http_parser_execute(&parser_, &settings, rbuf_.get(), n);
  const auto err = HTTP_PARSER_ERRNO(&parser_);
  if (err != HPE_OK && err != HPE_PAUSED) {
    if (answer_started_) {
      Finish(false);
    } else {
      Fail(502, "node '" + node_ + "' sent a malformed answer: " + http_errno_description(err));
    }
    Close();
    return;
  }
  if (answer_done_ && parsed < n) peer_keep_alive_ = false;  // bytes past the answer
  RelayToClient(answer_done_ ? parsed : n);
}

void PeerLink::RelayToClient(size_t n) {
  if (client_ == nullptr) return;
  answer_started_ = answer_started_ || n > 0;
  uv_stream_t* cs = client_->client_stream();
  uv_buf_t b = uv_buf_init(rbuf_.get(), static_cast<unsigned>(n));
  int w = n == 0 ? 0 : uv_try_write(cs, &b, 1);
  if (w == UV_EAGAIN) w = 0;
  if (w < 0) {  // the client is gone
    Finish(false);
    return;
  }
  if (static_cast<size_t>(w) == n) {
    AfterRelay();
    return;
  }
  // The client is slower than the peer: hold the peer until it took these bytes (the answer
  // timer waits too: the peer is not late, the client is).
  StopReading();
  uv_timer_stop(&timer_);
  relaying_ = true;
  b = uv_buf_init(rbuf_.get() + w, static_cast<unsigned>(n - static_cast<size_t>(w)));
  const int rc = uv_write(&relay_req_, cs, &b, 1, [](uv_write_t* req, int status) {
    auto* self = static_cast<PeerLink*>(req->data);
    self->relaying_ = false;
    if (self->state_ == State::kClosing) {
      if (self->open_handles_ == 0) self->owner_.Deleted(self);
      return;
    }
    if (status < 0) {
      self->Finish(false);
      return;
    }
    self->AfterRelay();
  });
  if (rc != 0) {
    relaying_ = false;
    Finish(false);
  }
}

void PeerLink::AfterRelay() {
  if (answer_done_) {
    Finish(true);
    return;
  }
  if (state_ == State::kExchange) {
    ArmAnswerTimer();
    StartReading();
  }
}

void PeerLink::StartReading() {
  if (state_ != State::kClosing) reading_.Start(tcp_, &PeerLink::OnAlloc, &PeerLink::OnRead);
}

void PeerLink::StopReading() { reading_.Stop(tcp_); }

void PeerLink::OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
  auto* link = static_cast<PeerLink*>(h->data);
  *buf = uv_buf_init(link->rbuf_.get(), kReadBytes);
}

void PeerLink::OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
  auto* link = static_cast<PeerLink*>(s->data);
  if (nread == 0) return;
  if (nread < 0) {
    if (link->state_ == State::kExchange && !link->answer_done_) {
      if (link->answer_started_) {
        link->Finish(false);
      } else {
        link->Fail(502, "node '" + link->node_ + "' closed the connection before answering: " +
                            uv_strerror(static_cast<int>(nread)));
      }
    }
    link->Close();
    return;
  }
  if (link->state_ != State::kExchange) {  // bytes while idle: not an answer to anything
    link->Close();
    return;
  }
  link->OnPeerData(static_cast<size_t>(nread));
}

void PeerLink::Fail(int http_status, std::string message) {
  ForwardClient* c = client_;
  client_ = nullptr;
  Close();
  if (c != nullptr) c->OnForwardFailed(http_status, std::move(message));
}

void PeerLink::Finish(bool complete) {
  ForwardClient* c = client_;
  client_ = nullptr;
  const bool reuse = complete && peer_keep_alive_ && !write_in_flight_ && queued_.empty() &&
                     state_ == State::kExchange;
  uv_timer_stop(&timer_);
  if (reuse) {
    state_ = State::kIdle;
    owner_.Idle(this);
    // Idle links keep reading: the peer closing one is seen before it is handed out again.
    StartReading();
  } else {
    Close();
  }
  if (c != nullptr) c->OnForwardDone(complete, status_);
}

void PeerLink::Detach() {
  client_ = nullptr;
  if (state_ == State::kConnecting || state_ == State::kExchange) Close();
}

void PeerLink::Close() {
  if (state_ == State::kClosing) return;
  state_ = State::kClosing;
  client_ = nullptr;
  owner_.Forget(this);
  auto on_closed = [](uv_handle_t* h) {
    auto* self = static_cast<PeerLink*>(h->data);
    // The last of its handles, and no relay write still pending on the client's socket.
    if (--self->open_handles_ == 0 && !self->relaying_) self->owner_.Deleted(self);
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), on_closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_closed);
}

// ---- the pool ------------------------------------------------------------------------------

PeerLinks::~PeerLinks() {
  // Links whose handles closed are gone; one still open here would be freed under libuv.
  if (!all_.empty()) spdlog::warn("gateway: {} peer link(s) left open at shutdown", all_.size());
}

PeerLink* PeerLinks::Acquire(const std::string& node, const std::string& address) {
  auto it = idle_.find(address);
  if (it != idle_.end() && !it->second.empty()) {
    PeerLink* link = it->second.back();
    it->second.pop_back();
    link->node_ = node;
    return link;
  }
  auto* link = new PeerLink(*this, loop_, node, address);
  all_.push_back(link);
  return link;
}

void PeerLinks::Idle(PeerLink* link) {
  auto& list = idle_[link->address_];
  if (list.size() >= kIdlePerPeer) {
    link->Close();
    return;
  }
  list.push_back(link);
}

void PeerLinks::Forget(PeerLink* link) {
  auto it = idle_.find(link->address_);
  if (it == idle_.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), link), list.end());
}

void PeerLinks::Deleted(PeerLink* link) {
  all_.erase(std::remove(all_.begin(), all_.end(), link), all_.end());
  delete link;
}

void PeerLinks::CloseAll() {
  auto links = all_;
  for (PeerLink* link : links) link->Close();
}

}  // namespace shoal
