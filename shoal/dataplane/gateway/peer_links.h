// Forwarding to other nodes' gateways (cluster mode): persistent TCP connections from one gateway
// loop to a peer gateway (PeerLink), pooled per peer address (PeerLinks). A forwarded request
// goes out as a rebuilt head plus the body as it arrives from the client (written straight from
// the client connection's read buffer; only what the socket does not take at once is kept, and
// the client is not read again until it has gone). The answer comes back the same way: the
// peer's bytes are relayed to the client as they arrive, the peer is not read again until the
// client took them, and http_parser finds the answer's end so the link can carry the next one.
#pragma once

#include <http_parser.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "shoal/dataplane/gateway/uv_reading.h"

namespace shoal {

// The client side of one forwarded exchange (the Connection that took the request).
class ForwardClient {
 public:
  virtual ~ForwardClient() = default;
  virtual uv_stream_t* client_stream() = 0;
  // The request bytes written so far have all gone to the peer: read more of the body.
  virtual void OnForwardDrained() = 0;
  // The peer could not be reached or gave no answer; nothing of one went to the client.
  virtual void OnForwardFailed(int http_status, std::string message) = 0;
  // The answer went to the client whole (`complete`) or broke off midway (the client's
  // connection must close). `status` is the peer's HTTP status (0 if unknown).
  virtual void OnForwardDone(bool complete, int status) = 0;
};

class PeerLinks;

class PeerLink {
 public:
  PeerLink(PeerLinks& owner, uv_loop_t* loop, std::string node, std::string address);

  // Starts an exchange for `client`: connects if needed; `head` goes out with the first body
  // bytes (Send) or at Flush.
  // `no_body`: the answer has no body whatever its head says (a HEAD request's).
  void Begin(ForwardClient* client, std::string head, bool no_body = false);
  // Request body bytes; they may be reused by the caller once this returns. False when some
  // are still queued: the caller stops reading until OnForwardDrained.
  bool Send(const char* data, size_t len);
  // The request is complete: what waits goes out now.
  void Flush();
  // The client went away: the link closes (an unfinished answer cannot be resumed).
  void Detach();

  const std::string& node() const { return node_; }
  const std::string& address() const { return address_; }

 private:
  friend class PeerLinks;
  enum class State { kIdle, kConnecting, kExchange, kClosing };
  static constexpr size_t kReadBytes = 64 * 1024;

  void Connect();
  void StartWrite();
  void Fail(int http_status, std::string message);
  void Finish(bool complete);
  void Close();
  void OnPeerData(size_t n);
  void RelayToClient(size_t n);
  void AfterRelay();
  // (Re)arms the timer: the peer must send something within the answer timeout.
  void ArmAnswerTimer();
  void StartReading();
  void StopReading();
  static void OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf);
  static void OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t*);
  static int OnHeadersComplete(http_parser* p);
  static int OnMessageComplete(http_parser* p);

  PeerLinks& owner_;
  std::string node_, address_;
  State state_ = State::kIdle;
  bool connected_ = false;
  UvReading reading_;
  int open_handles_ = 0;
  uv_tcp_t tcp_{};
  uv_timer_t timer_{};
  uv_connect_t connect_req_{};
  uv_write_t write_req_{};
  uv_write_t relay_req_{};
  ForwardClient* client_ = nullptr;
  // Request bytes: `writing_` is in flight, `queued_` waits behind it.
  std::string writing_, queued_;
  bool write_in_flight_ = false;
  // Answer bytes: read into rbuf_, relayed from there.
  std::unique_ptr<char[]> rbuf_;
  size_t relay_len_ = 0;
  bool relaying_ = false;
  http_parser parser_{};
  int status_ = 0;
  bool answer_started_ = false;  // bytes of the answer went to the client
  bool answer_done_ = false;
  bool peer_keep_alive_ = false;
  bool no_body_ = false;
};

// One loop's links, idle ones kept per peer address for the next request.
class PeerLinks {
 public:
  // `answer_timeout_ms`: an exchange whose peer sends nothing for so long fails (504).
  PeerLinks(uv_loop_t* loop, uint64_t answer_timeout_ms)
      : loop_(loop), answer_timeout_ms_(answer_timeout_ms) {}
  ~PeerLinks();
  PeerLink* Acquire(const std::string& node, const std::string& address);
  void CloseAll();  // loop shutdown

 private:
  friend class PeerLink;
  static constexpr size_t kIdlePerPeer = 64;
  void Idle(PeerLink* link);     // its exchange ended cleanly: keep it for the next
  void Forget(PeerLink* link);   // it closed
  void Deleted(PeerLink* link);  // its handles closed: the object is gone
  uv_loop_t* loop_;
  uint64_t answer_timeout_ms_;
  std::unordered_map<std::string, std::vector<PeerLink*>> idle_;
  std::vector<PeerLink*> all_;
};

}  // namespace shoal
