// One gateway event loop (one thread): its listener's connections, its data-plane endpoint,
// and the requests it has in flight. Dispatch sends a request's descriptor to an instance
// (or queues it in the function's router until one is free); the answer comes back on the
// loop's channel and goes out on the connection that asked. Other threads reach the loop only
// through its inbox.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/dataplane/channel/dataplane.h"
#include "shoal/dataplane/gateway/control_worker.h"
#include "shoal/dataplane/gateway/descriptor_outbox.h"
#include "shoal/dataplane/gateway/fl_tickets.h"
#include "shoal/dataplane/gateway/loop_inbox.h"
#include "shoal/dataplane/gateway/peer_links.h"
#include "shoal/dataplane/gateway/pending_requests.h"
#include "shoal/interfaces/fl_data_path.h"
#include "shoal/interfaces/http_reply.h"
#include "shoal/interfaces/request_sink.h"

namespace shoal {

class Connection;
class Gateway;
struct FunctionRuntime;

struct InboxItem {
  enum class Kind { kAssign, kReject, kFailInstance, kControlReply, kFlAdmitted } kind;
  uint64_t request_id = 0;
  uint32_t instance = 0;
  int status = 0;  // kFlAdmitted: 0, or the HTTP status of the top's refusal (`reason`)
  std::string reason;
  std::unique_ptr<HttpReply> reply;  // kControlReply
  FlAdmission fl{};                  // kFlAdmitted
};

class GatewayLoop {
 public:
  GatewayLoop(Gateway& gw, uint32_t index);
  ~GatewayLoop();

  Status Init(int listen_fd, Endpoint endpoint);
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop();
  // Any thread.
  void Post(InboxItem item);

  Gateway& gw() { return gw_; }
  uint32_t index() const { return index_; }
  uv_loop_t* uv() { return &loop_; }
  const NodeConfig& config() const;

  // Called by connections.
  void Dispatch(Connection* conn, std::shared_ptr<FunctionRuntime> fn, uint64_t buffer,
                uint64_t length, FlAdmission fl = {});
  void CallControl(Connection* conn, ControlCall call);
  // Cluster mode: an update for a job whose top is on another node waits (its connection
  // parked, not reading: only `head`, the update's prefix and header, has been read, and no pool
  // memory is taken) while the top admits it off this loop; then the connection reads its body
  // (Connection::OnFlAdmitted) or answers the top's refusal (OnFlRefused).
  void AdmitForTop(Connection* conn, std::shared_ptr<FunctionRuntime> fn, std::string_view job,
                   std::span<const std::byte> head, std::string_view bearer);
  void Abandon(uint32_t pending_index);
  // An FL update admitted on its head while its body still arrives into `buffer` (still the
  // connection's): a leaf is picked now, if one is free at once, and told of each part of the
  // body as it lands (kBodyChunk), so that it folds while the rest arrives. The pending
  // request's index, or none (no leaf free: the update goes once whole, as any request).
  std::optional<uint32_t> StartBodyStream(Connection* conn, std::shared_ptr<FunctionRuntime> fn,
                                          uint64_t buffer, FlAdmission fl);
  // `length` bytes of the buffer are there now (payload head included).
  void AnnounceBody(uint32_t pending_index, uint64_t length);
  // The body is whole (`length` bytes): the buffer goes to the leaf with the request.
  void FinishBodyStream(uint32_t pending_index, uint64_t length);
  // The client left before the body was whole: the request goes to the leaf marked so (it drops
  // what it folded; the coordinator rebuilds the partial sum), its answer dropped.
  void AbandonBodyStream(uint32_t pending_index);
  void OnConnectionClosed(Connection* conn);
  PeerLinks& peers() { return *peers_; }  // links to other nodes' gateways (forwarding)

 private:
  void Run();
  // `status`: the descriptor's (kStatusClientGone for an update whose client left mid-body).
  void SendToInstance(uint32_t idx, uint32_t instance, uint32_t status = 0);
  void RouteAssignment(const shoal::RouteAssignment& a);
  void OnChannelReadable();
  void OnInbox();
  void OnResponse(const EventDescriptor& d);
  // A piece of a streamed answer: to its connection, the request left pending.
  void OnResponseChunk(const EventDescriptor& d);
  // Frees the buffer of an answer (or streamed piece) no request waits for any more.
  void ReleaseStale(const EventDescriptor& d, const char* what);
  void OnControlReply(uint64_t request_id, HttpReply reply);
  void OnFlAdmitted(InboxItem& item);
  void FailInstance(uint32_t instance, int status, const std::string& reason);
  void Reject(uint64_t request_id, int status, const std::string& reason);
  void FlushOutbox();
  // Sends the descriptors this iteration queued (the check handle), arming the retry timer for
  // those a full queue refused.
  void SendQueued();
  // A queued request descriptor that could not go (its instance is gone): fails its request.
  void OnSendFailed(const EventDescriptor& d, const Status& st);
  // The request at `idx` did not reach `instance`: its buffer back (from the instance's slot
  // when `transferred`), its slot released, a 502 to its client.
  void FailSend(uint32_t idx, uint32_t instance, const Status& st, bool transferred);
  // Gives a request buffer back to the pool (shoald's slot), logging a failure.
  void ReleaseBuffer(FunctionRuntime& fn, uint64_t buffer, const char* what);

  Gateway& gw_;
  uint32_t index_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_poll_t channel_poll_{};
  uv_async_t inbox_async_{};
  uv_async_t stop_async_{};
  uv_timer_t retry_timer_{};
  uv_check_t send_check_{};
  bool initialised_ = false;
  Endpoint endpoint_;
  std::unique_ptr<DescriptorChannel> channel_;
  std::unique_ptr<DescriptorOutbox> outbox_;
  LoopInbox<InboxItem> inbox_;
  // How threads that may outlive the loop (the FL admit threads) reach its inbox: `loop` is
  // cleared when the loop stops.
  struct Gate {
    std::mutex mu;
    GatewayLoop* loop = nullptr;
  };
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  PendingSlab pending_;
  FlTickets fl_;
  std::vector<Connection*> connections_;
  std::unique_ptr<PeerLinks> peers_;
  std::thread thread_;
};

}  // namespace shoal
