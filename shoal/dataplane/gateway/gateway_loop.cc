#include "shoal/dataplane/gateway/gateway_loop.h"

#include <algorithm>
#include <array>

#include "shoal/common/buffer_release.h"
#include "shoal/common/clock.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/gateway/connection.h"
#include "shoal/dataplane/gateway/gateway.h"

namespace shoal {

namespace {
constexpr size_t kDescriptorBatch = 64;
}  // namespace

GatewayLoop::GatewayLoop(Gateway& gw, uint32_t index) : gw_(gw), index_(index), fl_(gw.hooks_.fl) {}

GatewayLoop::~GatewayLoop() {
  if (thread_.joinable()) thread_.join();
  if (initialised_) uv_loop_close(&loop_);
}

const NodeConfig& GatewayLoop::config() const { return gw_.config_; }

Status GatewayLoop::Init(int listen_fd, Endpoint endpoint) {
  uv_loop_init(&loop_);
  initialised_ = true;
  loop_.data = this;
  peers_ = std::make_unique<PeerLinks>(&loop_,
                                       static_cast<uint64_t>(gw_.config_.forward_timeout_s * 1000));
  uv_tcp_init(&loop_, &listener_);
  listener_.data = this;
  if (int rc = uv_tcp_open(&listener_, listen_fd); rc != 0) {
    return Internal(std::string("uv_tcp_open: ") + uv_strerror(rc));
  }
  int rc =
      uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 1024, [](uv_stream_t* s, int status) {
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
  outbox_ = std::make_unique<DescriptorOutbox>(
      *channel_, [this](const EventDescriptor& d, const Status& st) { OnSendFailed(d, st); });
  // The descriptors of one iteration go together once its I/O callbacks have run.
  uv_check_init(&loop_, &send_check_);
  send_check_.data = this;
  uv_check_start(&send_check_,
                 [](uv_check_t* c) { static_cast<GatewayLoop*>(c->data)->SendQueued(); });
  uv_poll_init(&loop_, &channel_poll_, channel_->fd());
  channel_poll_.data = this;
  uv_poll_start(&channel_poll_, UV_READABLE, [](uv_poll_t* h, int, int) {
    static_cast<GatewayLoop*>(h->data)->OnChannelReadable();
  });
  uv_async_init(&loop_, &inbox_async_,
                [](uv_async_t* a) { static_cast<GatewayLoop*>(a->data)->OnInbox(); });
  inbox_async_.data = this;
  uv_async_init(&loop_, &stop_async_, [](uv_async_t* a) {
    auto* self = static_cast<GatewayLoop*>(a->data);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->listener_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->channel_poll_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->inbox_async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->stop_async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->retry_timer_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->send_check_), nullptr);
    auto conns = self->connections_;
    for (Connection* c : conns) c->Close();
    self->peers_->CloseAll();
  });
  stop_async_.data = this;
  uv_timer_init(&loop_, &retry_timer_);
  retry_timer_.data = this;
  {
    std::lock_guard lock(gate_->mu);
    gate_->loop = this;
  }
  return {};
}

void GatewayLoop::Run() {
  uv_run(&loop_, UV_RUN_DEFAULT);
  // Answer nothing more: in-flight requests' buffers are reclaimed with the pool.
}

void GatewayLoop::Stop() {
  if (!initialised_) return;
  {
    std::lock_guard lock(gate_->mu);
    gate_->loop = nullptr;
  }
  uv_async_send(&stop_async_);
  if (thread_.joinable()) thread_.join();
}

void GatewayLoop::Post(InboxItem item) {
  inbox_.Push(std::move(item));
  uv_async_send(&inbox_async_);
}

void GatewayLoop::OnConnectionClosed(Connection* conn) {
  auto it = std::find(connections_.begin(), connections_.end(), conn);
  if (it != connections_.end()) {
    *it = connections_.back();
    connections_.pop_back();
  }
}

void GatewayLoop::ReleaseBuffer(FunctionRuntime& fn, uint64_t buffer, const char* what) {
  ReleaseOrLog(*fn.pool, buffer, kShoaldSlot, what, "function '{}'", fn.spec.name);
}

void GatewayLoop::Dispatch(Connection* conn, std::shared_ptr<FunctionRuntime> fn, uint64_t buffer,
                           uint64_t length, FlAdmission fl) {
  const uint32_t idx = pending_.Alloc();
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
  uv_timer_start(
      conn->timer(), [](uv_timer_t* t) { static_cast<Connection*>(t->data)->OnTimeoutFired(); },
      timeout_ms ? timeout_ms : 1, 0);
  auto r = f.router.Acquire(index_, pending_.RequestId(idx));
  switch (r.outcome) {
    case FunctionRouter::Outcome::kAssigned:
      SendToInstance(idx, r.instance);
      return;
    case FunctionRouter::Outcome::kQueued:
      p.queued = true;
      gw_.scale_.Poke();
      return;
    case FunctionRouter::Outcome::kRejected: {
      fl_.Finish(p, 503);
      ReleaseBuffer(f, buffer, "request");
      conn->ClearPending();
      auto keep = std::move(p.fn);
      pending_.Free(idx);
      gw_.metrics_.gateway_rejections.Add({{"reason", "queue_full"}}).Increment();
      conn->WriteError(503, "function '" + keep->spec.name + "' has too many queued requests",
                       true);
      return;
    }
  }
}

void GatewayLoop::CallControl(Connection* conn, ControlCall call) {
  const uint32_t idx = pending_.Alloc();
  Pending& p = pending_[idx];
  p.conn = conn;
  p.control = true;
  conn->SetPending(idx);
  call.loop = index_;
  call.request_id = pending_.RequestId(idx);
  gw_.control_worker_->Submit(std::move(call));
}

void GatewayLoop::AdmitForTop(Connection* conn, std::shared_ptr<FunctionRuntime> fn,
                              std::string_view job, std::span<const std::byte> head,
                              std::string_view bearer) {
  const uint32_t idx = pending_.Alloc();
  Pending& p = pending_[idx];
  p.conn = conn;
  p.fn = std::move(fn);
  p.admitting = true;
  conn->SetPending(idx);
  BufferPool& pool = *p.fn->pool;
  // The answer comes on an admit thread (or at once, an error known here): through the inbox.
  gw_.hooks_.fl->AdmitForTopAsync(
      job, pool, head, 0, bearer,
      [gate = gate_, id = pending_.RequestId(idx)](Result<FlAdmission> a) {
        InboxItem item{InboxItem::Kind::kFlAdmitted, id, 0, 0, {}, {}, {}};
        if (a.ok()) {
          item.fl = *a;
        } else {
          item.status = FlAdmitErrorStatus(a.status());
          item.reason = a.status().message();
        }
        std::lock_guard lock(gate->mu);
        if (gate->loop != nullptr) gate->loop->Post(std::move(item));
      });
}

void GatewayLoop::OnFlAdmitted(InboxItem& item) {
  uint32_t idx;
  Pending* p = pending_.Lookup(item.request_id, &idx);
  if (p == nullptr || !p->admitting) return;
  Connection* conn = p->conn;
  pending_.Free(idx);
  if (conn == nullptr) {
    // Admitted for a client that left meanwhile: it does not count; that client sends it again.
    if (item.status == 0) fl_.Finish(item.fl.ticket, 503);
    return;
  }
  conn->ClearPending();
  if (item.status != 0) {
    conn->OnFlRefused(item.status, item.reason);  // nothing was read past its header
    return;
  }
  conn->OnFlAdmitted(item.fl);
}

void GatewayLoop::OnControlReply(uint64_t request_id, HttpReply reply) {
  uint32_t idx;
  Pending* p = pending_.Lookup(request_id, &idx);
  if (p == nullptr || !p->control) return;
  Connection* conn = p->conn;
  pending_.Free(idx);
  if (conn == nullptr) return;  // the client went away meanwhile
  conn->ClearPending();
  conn->WriteReply(std::move(reply));
}

std::optional<uint32_t> GatewayLoop::StartBodyStream(Connection* conn,
                                                     std::shared_ptr<FunctionRuntime> fn,
                                                     uint64_t buffer, FlAdmission fl) {
  const uint32_t idx = pending_.Alloc();
  auto r = fn->router.Acquire(index_, pending_.RequestId(idx), /*may_queue=*/false);
  if (r.outcome != FunctionRouter::Outcome::kAssigned) {
    pending_.Free(idx);
    return std::nullopt;
  }
  Pending& p = pending_[idx];
  p.conn = conn;
  p.fl_ticket = fl.ticket;
  p.fl_weight = fl.coefficient;
  p.fn = std::move(fn);
  p.buffer = buffer;
  p.instance = r.instance;
  p.body_arriving = true;
  conn->SetPending(idx);  // no timer yet: the function's timeout runs once the body is whole
  return idx;
}

void GatewayLoop::AnnounceBody(uint32_t idx, uint64_t length) {
  Pending& p = pending_[idx];
  if (!p.in_use || !p.body_arriving) return;
  EventDescriptor d{};
  d.target = p.instance;
  d.version = kDescriptorVersion;
  d.kind = static_cast<uint16_t>(EventKind::kBodyChunk);
  d.function_id = p.fn->spec.id;
  d.source = GatewayEndpoint(index_);
  d.request_id = pending_.RequestId(idx);
  d.offset = p.buffer;
  d.length = length;
  d.timestamp_ns = MonotonicNs();
  fl_.Stamp(p, p.instance, d);
  if (d.aux_offset == 0) return;  // no partial sum: the leaf folds nothing of it
  outbox_->Queue(d);
}

void GatewayLoop::FinishBodyStream(uint32_t idx, uint64_t length) {
  Pending& p = pending_[idx];
  p.body_arriving = false;
  p.length = length;
  const auto timeout_ms = static_cast<uint64_t>(p.fn->spec.timeout_s * 1000.0);
  uv_timer_start(
      p.conn->timer(), [](uv_timer_t* t) { static_cast<Connection*>(t->data)->OnTimeoutFired(); },
      timeout_ms ? timeout_ms : 1, 0);
  SendToInstance(idx, p.instance);
}

void GatewayLoop::AbandonBodyStream(uint32_t idx) {
  Pending& p = pending_[idx];
  p.body_arriving = false;
  p.conn = nullptr;  // its answer is dropped (OnResponse), the ticket finished with it
  SendToInstance(idx, p.instance, kStatusClientGone);
}

void GatewayLoop::SendToInstance(uint32_t idx, uint32_t instance, uint32_t status) {
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
  d.request_id = pending_.RequestId(idx);
  d.offset = p.buffer;
  d.length = p.length;
  d.timestamp_ns = MonotonicNs();
  d.status = status;
  fl_.Stamp(p, instance, d);
  // The instance holds the request from here on; if it dies, the pool reclaims it.
  Status st = f.pool->Transfer(p.buffer, kShoaldSlot, slot);
  if (st.ok()) {
    outbox_->Queue(d);  // sent with the iteration's others (SendQueued)
    return;
  }
  // Without the hold the instance could not free the buffer: the descriptor is not sent.
  spdlog::error("transfer to instance {:#x} failed: {}", instance, st.ToString());
  FailSend(idx, instance, st, /*transferred=*/false);
}

void GatewayLoop::SendQueued() {
  if (outbox_->SendQueued() && !uv_is_active(reinterpret_cast<uv_handle_t*>(&retry_timer_))) {
    uv_timer_start(
        &retry_timer_, [](uv_timer_t* t) { static_cast<GatewayLoop*>(t->data)->FlushOutbox(); }, 1,
        1);
  }
}

void GatewayLoop::OnSendFailed(const EventDescriptor& d, const Status& st) {
  // A body chunk's buffer stayed the connection's: the request that follows it says the rest.
  if (d.kind == static_cast<uint16_t>(EventKind::kBodyChunk)) return;
  uint32_t idx;
  Pending* p = pending_.Lookup(d.request_id, &idx);
  // Not waiting for this instance any more (failed with it meanwhile): nothing to undo.
  if (p == nullptr || p->control || p->admitting || p->queued || p->instance != d.target) return;
  FailSend(idx, d.target, st, /*transferred=*/true);
}

void GatewayLoop::FailSend(uint32_t idx, uint32_t instance, const Status& st, bool transferred) {
  Pending& p = pending_[idx];
  FunctionRuntime& f = *p.fn;
  const HolderSlot slot = SlotOfInstance(instance);
  // The instance is gone (or never got the buffer): take it back and fail the request.
  fl_.Finish(p, 502);
  if (transferred) {
    if (Status back = f.pool->Transfer(p.buffer, slot, kShoaldSlot); !back.ok()) {
      // The instance's slot is reclaimed with it; the buffer goes back then.
      spdlog::warn("request buffer {:#x} stays with instance {:#x}: {}", p.buffer, instance,
                   back.ToString());
    } else {
      ReleaseBuffer(f, p.buffer, "request");
    }
  } else {
    ReleaseBuffer(f, p.buffer, "request");
  }
  if (auto next = f.router.Release(instance)) RouteAssignment(*next);
  Connection* conn = p.conn;
  auto fn = std::move(p.fn);
  pending_.Free(idx);
  if (conn) {
    conn->ClearPending();
    conn->WriteError(
        502, "instance of function '" + fn->spec.name + "' is unavailable: " + st.message());
  }
}

void GatewayLoop::FlushOutbox() {
  if (outbox_->Flush()) uv_timer_stop(&retry_timer_);
}

void GatewayLoop::RouteAssignment(const shoal::RouteAssignment& a) {
  if (a.loop != index_) {
    gw_.loops_[a.loop]->Post({InboxItem::Kind::kAssign, a.request_id, a.instance, 0, {}, {}});
    return;
  }
  // Same loop: handle now, no hop.
  uint32_t idx;
  Pending* p = pending_.Lookup(a.request_id, &idx);
  if (p != nullptr && p->conn != nullptr && p->queued) {
    SendToInstance(idx, a.instance);
    return;
  }
  if (p != nullptr && p->conn == nullptr && !p->admitting) {
    // The waiter gave up meanwhile: pass the slot on.
    fl_.Finish(*p, 504);
    auto keep = p->fn;
    ReleaseBuffer(*keep, p->buffer, "request");
    pending_.Free(idx);
    if (auto next = keep->router.Release(a.instance)) RouteAssignment(*next);
    return;
  }
  spdlog::debug("assignment for unknown request {:#x}", a.request_id);
}

void GatewayLoop::Abandon(uint32_t idx) {
  Pending& p = pending_[idx];
  if (!p.in_use) return;
  if (p.queued && p.fn->router.CancelWaiter(index_, pending_.RequestId(idx))) {
    fl_.Finish(p, 504);
    ReleaseBuffer(*p.fn, p.buffer, "request");
    pending_.Free(idx);
    return;
  }
  if (p.fl_ticket != 0 && !p.queued && !p.admitting) {
    // Its leaf still folds it: it counts once the leaf answers; a leaf that never does holds
    // its round (and its job) back, so say so.
    spdlog::warn(
        "function '{}': FL update (ticket {:#x}) given up by its client or its timeout "
        "while instance {:#x} folds it; it counts if that instance still answers",
        p.fn->spec.name, p.fl_ticket, p.instance);
  }
  p.conn = nullptr;  // an answer or an assignment is on its way: drop it when it comes
}

void GatewayLoop::OnChannelReadable() {
  std::array<EventDescriptor, kDescriptorBatch> batch;
  for (;;) {
    auto got = channel_->Receive(batch);
    if (!got.ok() || *got == 0) return;
    for (size_t i = 0; i < *got; ++i) OnResponse(batch[i]);
    // A short batch emptied the socket: the poll (level-triggered) says when more comes.
    if (*got < batch.size()) return;
  }
}

void GatewayLoop::ReleaseStale(const EventDescriptor& d, const char* what) {
  if (d.offset == 0) return;
  // Its pool is the one of the function that sent it; found by the instance's function id.
  for (const auto& fn : gw_.functions_.All()) {
    if (fn->spec.id == d.function_id) {
      ReleaseBuffer(*fn, d.offset, what);
      return;
    }
  }
}

void GatewayLoop::OnResponseChunk(const EventDescriptor& d) {
  uint32_t idx;
  Pending* p = pending_.Lookup(d.request_id, &idx);
  if (p == nullptr || p->control || p->admitting || p->queued || p->instance != d.source ||
      p->conn == nullptr) {
    // Its client is gone (closed, timed out) or the request was failed: drop the piece.
    ReleaseStale(d, "stale response piece");
    return;
  }
  p->conn->WriteFunctionChunk(d, p->fn);
}

void GatewayLoop::OnResponse(const EventDescriptor& d) {
  if (d.kind == static_cast<uint16_t>(EventKind::kResponseChunk)) {
    OnResponseChunk(d);
    return;
  }
  if (d.kind != static_cast<uint16_t>(EventKind::kResponse) &&
      d.kind != static_cast<uint16_t>(EventKind::kError)) {
    return;
  }
  uint32_t idx;
  Pending* p = pending_.Lookup(d.request_id, &idx);
  if (p == nullptr || p->control || p->admitting || p->queued || p->instance != d.source) {
    // Stale (already failed or timed out and reused): the response buffer is ours to free.
    ReleaseStale(d, "stale response");
    return;
  }
  // A late answer to an abandoned FL update still counts: the leaf folded it.
  fl_.Finish(*p,
             d.kind == static_cast<uint16_t>(EventKind::kResponse) && d.offset != 0
                 ? static_cast<int>(ReadPayload(p->fn->pool->Data(d.offset)).status)
                 : static_cast<int>(d.status ? d.status : 500),
             /*leaf_answered=*/true, /*partial_changed=*/d.aux_offset != 0);
  auto fn = std::move(p->fn);
  Connection* conn = p->conn;
  pending_.Free(idx);
  if (auto next = fn->router.Release(d.source)) RouteAssignment(*next);
  if (conn == nullptr) {
    if (d.offset != 0) ReleaseBuffer(*fn, d.offset, "response");
    return;
  }
  conn->ClearPending();
  conn->WriteFunctionResponse(d, fn);
}

void GatewayLoop::OnInbox() {
  inbox_.Drain([this](InboxItem& item) {
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
      case InboxItem::Kind::kControlReply:
        OnControlReply(item.request_id, std::move(*item.reply));
        break;
      case InboxItem::Kind::kFlAdmitted:
        OnFlAdmitted(item);
        break;
    }
  });
}

void GatewayLoop::Reject(uint64_t request_id, int status, const std::string& reason) {
  uint32_t idx;
  Pending* p = pending_.Lookup(request_id, &idx);
  if (p == nullptr || p->control || p->admitting) return;
  fl_.Finish(*p, status);
  ReleaseBuffer(*p->fn, p->buffer, "request");
  Connection* conn = p->conn;
  pending_.Free(idx);
  if (conn) {
    conn->ClearPending();
    conn->WriteError(status, reason, status == 503);
  }
}

void GatewayLoop::FailInstance(uint32_t instance, int status, const std::string& reason) {
  for (uint32_t idx = 0; idx < pending_.size(); ++idx) {
    Pending& p = pending_[idx];
    if (!p.in_use || p.control || p.admitting || p.queued || p.instance != instance) continue;
    if (p.body_arriving) {
      // Its body still arrives into the connection's buffer: the leaf's part is undone (the
      // partial sum rebuilt) and the update admitted again once whole, as any request.
      fl_.Finish(p, 502);
      Connection* conn = p.conn;
      pending_.Free(idx);
      if (conn) conn->OnFlStreamLost();
      continue;
    }
    // The request buffer was the instance's: the pool reclaims it with the instance's slot.
    fl_.Finish(p, status);
    Connection* conn = p.conn;
    pending_.Free(idx);
    if (conn) {
      conn->ClearPending();
      conn->WriteError(status, reason);
    }
  }
  // Descriptors for it still waiting to be sent are dropped with it.
  outbox_->DropFor(instance);
}

}  // namespace shoal
