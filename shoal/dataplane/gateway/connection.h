// One client connection of a gateway loop: reads requests one at a time (HttpRequestParser),
// decides their route (routes.h) and what the route needs (a function and a pool buffer for
// the body, a bearer token), hands them on (to an instance through the loop, to a control
// thread, to another node's gateway through a PeerLink, or answers them here), and writes the
// answer.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/common/descriptor.h"
#include "shoal/dataplane/gateway/fl_update_ingest.h"
#include "shoal/dataplane/gateway/http_request_parser.h"
#include "shoal/dataplane/gateway/peer_links.h"
#include "shoal/dataplane/gateway/uv_reading.h"
#include "shoal/interfaces/fl_data_path.h"
#include "shoal/interfaces/forward_table.h"
#include "shoal/interfaces/http_reply.h"
#include "shoal/security/auth/token_store.h"

namespace shoal {

class GatewayLoop;
struct FunctionRuntime;

class Connection final : public RequestEvents, public ForwardClient {
 public:
  static constexpr size_t kReadBufferBytes = 64 * 1024;
  static constexpr size_t kChunkedInitialBytes = 64 * 1024;
  // At most this much of a body per read: libuv reads a readable stream up to 32 times per
  // callback, so a 46.8 MB update arriving over loopback would otherwise hold the loop for the
  // whole copy (~10-20 ms) while the loop's other connections wait; 256 KiB bounds one
  // connection's turn at 8 MiB.
  static constexpr size_t kBodyReadBytes = 256 * 1024;

  explicit Connection(GatewayLoop& loop);

  bool Accept(uv_stream_t* server);
  void StartReading();
  void StopReading();
  void Close();

  // A function's answer (kResponse or kError descriptor); after streamed pieces, their end.
  void WriteFunctionResponse(const EventDescriptor& d, const std::shared_ptr<FunctionRuntime>& fn);
  // A piece of a streamed answer (kResponseChunk; connection_stream.cc): the first one sends the
  // head with Transfer-Encoding: chunked, each piece goes out as one chunk.
  void WriteFunctionChunk(const EventDescriptor& d, const std::shared_ptr<FunctionRuntime>& fn);
  // A control route's answer.
  void WriteReply(HttpReply reply);
  void WriteError(int status, std::string_view message, bool retry_after = false);
  void OnTimeoutFired();
  void SetPending(uint32_t idx) {
    pending_idx_ = idx;
    has_pending_ = true;
  }
  void ClearPending() {
    has_pending_ = false;
    uv_timer_stop(&timer_);
  }
  uv_timer_t* timer() { return &timer_; }
  // Cluster mode: the top admitted (or refused) the update whose header this connection read;
  // its body is read now (into the pool), or the refusal answered and the connection closed.
  void OnFlAdmitted(FlAdmission admission);
  void OnFlRefused(int status, const std::string& reason, bool retry_after = false);
  // The leaf folding the update while its body arrives is gone (GatewayLoop::FailInstance).
  void OnFlStreamLost();

  // RequestEvents
  void OnBegin() override;
  bool OnHead(const RequestHead& head) override;
  bool OnBodyPiece(const char* at, size_t len) override;

  // ForwardClient
  uv_stream_t* client_stream() override { return reinterpret_cast<uv_stream_t*>(&tcp_); }
  void OnForwardDrained() override;
  void OnForwardFailed(int http_status, std::string message) override;
  void OnForwardDone(bool complete, int status) override;

 private:
  // kFlHead: an FL update for a top elsewhere, its prefix and header read into fl_.head() (no
  // pool memory until the top admits it).
  // kDiscard: after such an update's refusal, the rest of its body is read and dropped (in the
  // read buffer) before the close, so that the client reads the answer rather than a reset.
  enum class State { kHeaders, kFlHead, kBody, kBusy, kDiscard, kClosing };
  enum class Route {
    kNone,
    kFunction,
    kForward,
    kControl,
    kMetrics,
    kHealthz,
    kReadyz,
    kV2Server,
    kV2Live,
    kV2Ready,
    kError
  };

  static void OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf);
  static void OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf);
  static void OnWritten(uv_write_t* req, int status);
  static void OnClosed(uv_handle_t* h);

  // Decides where the request goes and prepares where its body lands. True takes the body
  // out of the parser's hands (Content-Length bodies are read straight into the pool).
  bool RouteRequest(const RequestHead& head);
  // A function route whose function is known and allowed: the body's pool buffer.
  bool PrepareFunctionBody(const RequestHead& head);
  // Such an update for a job whose top is on another node: only its header is read before the
  // top's answer.
  bool PrepareMemberUpdate(const RequestHead& head);
  // Moves the update's header from the read buffer into fl_; asks the top once it is whole.
  void FeedFlHead();
  // After its refusal was written: drops the rest of the update's body, then closes (false:
  // nothing left to drop).
  bool StartDiscard();
  // Cluster mode: a function (or model) that is not on this node but on another goes there.
  // False when no other node runs it; otherwise as RouteRequest.
  bool TryForward(const RequestHead& head, ForwardTable::Kind kind, std::string_view name,
                  bool* take_body);
  void SendForwardBody(const char* data, size_t len);
  void CountForward(const char* result);
  // After an answer went out: the next request (pipelined bytes first), or close.
  void NextRequest();
  bool Reject(int status, std::string message, bool retry_after = false);
  // Sets body_limit_ (the function's, else the gateway's); over it, Reject's answer to a 413.
  std::optional<bool> RejectOverBodyLimit(uint64_t content_length);
  bool Authenticate(const RequestHead& head);
  bool Authorize(const RequestHead& head, auth::Action action, std::string_view ns,
                 std::string_view job);
  void SendContinue();
  bool AppendFunctionBody(const char* at, size_t len);
  // The pool buffer's payload head (what HTTP said about the body) for a body of `body_len`.
  void WriteRequestPayloadHead(uint64_t body_len);
  // An FL update's body grew (Content-Length, into the pool): its protocol's next step.
  void OnFlBodyProgress();
  void Consume();
  void HandleRequest();
  void DispatchFunction();
  void RecordFunctionStats(FunctionRuntime& fn, int status);
  // `shared`, when set, is the body instead of `body` (bytes held elsewhere: a model).
  void WriteReply(int status, std::string_view content_type, std::string body,
                  const std::vector<std::pair<std::string, std::string>>& headers = {},
                  std::shared_ptr<const std::string> shared = nullptr);
  void StartWrite(std::string_view body);
  void AfterWrite();
  void ReleaseRequestBuffer();
  // Gives `buffer` (0: none) back to `fn`'s pool as shoald's slot and zeroes it; a failure is
  // logged naming the function and `what` ("request", "response").
  static void ReleaseBuffer(const std::shared_ptr<FunctionRuntime>& fn, uint64_t& buffer,
                            const char* what);
  void SetError(int status, std::string message, bool retry_after = false) {
    route_ = Route::kError;
    error_status_ = status;
    error_message_ = std::move(message);
    error_retry_after_ = retry_after;
  }
  bool keep_open() const { return keep_alive_ && !close_after_; }

  GatewayLoop& loop_;
  uv_tcp_t tcp_{};
  uv_timer_t timer_{};
  uv_write_t write_req_{};
  HttpRequestParser parser_;
  std::unique_ptr<char[]> rbuf_;
  size_t rbuf_len_ = 0;
  State state_ = State::kHeaders;
  int open_handles_ = 2;

  // The request being read.
  bool keep_alive_ = true;
  bool close_after_ = false;
  auth::Principal principal_;  // who the request's token names
  Route route_ = Route::kNone;
  std::string function_name_, sub_path_, query_, path_;
  FlUpdateIngest fl_;  // POST /v1/jobs/{job}/updates: the update's own protocol
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

  // A streamed answer (connection_stream.cc). Pieces are copied, framed as chunks, into
  // stream_out_ (small: tokens) and their pool buffers released at once; one write is in flight
  // at a time (stream_sending_), and what came meanwhile goes with the next. The loop never
  // waits on the client: a slow reader only makes stream_out_ longer.
  void AppendChunk(std::string_view bytes);
  void FlushStream();
  void OnStreamWritten(int status);
  void EndStream(const EventDescriptor& d, const std::shared_ptr<FunctionRuntime>& fn);
  bool streaming_ = false;
  bool stream_end_ = false;  // the last chunk is queued: the request is done once it is written
  int stream_status_ = 200;
  std::string stream_out_;
  std::string stream_sending_;

  // A forwarded request (Route::kForward): its link to the peer, and whether reading the
  // client's body waits for the link to drain.
  PeerLink* fwd_ = nullptr;
  std::string fwd_node_;
  bool fwd_chunked_ = false;
  bool fwd_paused_ = false;
  UvReading reading_;
  bool peer_shut_ = false;  // the client shut its sending side while a request was served
};

}  // namespace shoal
