#include "shoal/runtime/instance/function_instance.h"

#include <http_parser.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <span>
#include <thread>

#include "shoal/common/buffer_release.h"
#include "shoal/common/clock.h"
#include "shoal/common/json_escape.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"

namespace shoal {
namespace {

constexpr size_t kReceiveBatch = 64;  // descriptors read per recv
// Replies to inline requests are kept for their batch's one send only while the handler has
// answered each of the last kQuickStreak requests within kQuickHandlerNs; otherwise each goes
// before the next request runs. So a handler that is ever slow holds no reply back; one quick
// for kQuickStreak requests in a row may hold its batch's replies for one slow request's time.
constexpr uint64_t kQuickHandlerNs = 20'000;
constexpr uint32_t kQuickStreak = 16;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A handler's error may quote the request's bytes (a body that is not JSON): valid UTF-8 only.
std::string JsonEscape(std::string_view s) {
  std::string out;
  AppendJsonEscaped(out, s);
  return out;
}

}  // namespace

Request FunctionInstance::MakeRequest(const PayloadView& payload, const EventDescriptor& d) {
  Request request;
  request.method = http_method_str(static_cast<http_method>(payload.method));
  request.path = payload.path;
  request.query = payload.query;
  request.content_type = payload.content_type;
  request.body = payload.body;
  request.arrived = payload.body.size();
  if (d.aux_offset != 0) request.aux = pool_.Data(d.aux_offset);
  request.aux_value = d.aux_value;
  return request;
}

void FunctionInstance::ProcessBodyChunk(const EventDescriptor& chunk) {
  const PayloadView payload = ReadPayload(pool_.Data(chunk.offset));
  if (!payload.valid) return;  // its kRequest says so
  Request request = MakeRequest(payload, chunk);
  const uint64_t body_at =
      static_cast<uint64_t>(payload.body.data() - pool_.Data(chunk.offset).data());
  request.arrived =
      chunk.length > body_at ? std::min<uint64_t>(chunk.length - body_at, payload.body.size()) : 0;
  handler_->OnBodyArriving(request);
}

Result<InstanceOptions> InstanceOptions::FromEnvironment() {
  InstanceOptions o;
  o.function = Env("SHOAL_FUNCTION");
  o.node = Env("SHOAL_NODE");
  o.dataplane = Env("SHOAL_DATAPLANE");
  o.pool = Env("SHOAL_POOL");
  o.handler = Env("SHOAL_HANDLER");
  if (o.function.empty() || o.pool.empty() || o.handler.empty() || o.dataplane.empty()) {
    return InvalidArgument(
        "shoal-fn is started by shoald: SHOAL_FUNCTION, SHOAL_POOL, SHOAL_HANDLER and "
        "SHOAL_DATAPLANE must be set");
  }
  o.function_id = static_cast<uint32_t>(std::strtoul(Env("SHOAL_FUNCTION_ID"), nullptr, 10));
  o.endpoint = static_cast<uint32_t>(std::strtoul(Env("SHOAL_ENDPOINT"), nullptr, 10));
  o.slot = static_cast<HolderSlot>(std::strtoul(Env("SHOAL_SLOT"), nullptr, 10));
  o.concurrency = static_cast<uint32_t>(std::strtoul(Env("SHOAL_CONCURRENCY"), nullptr, 10));
  if (o.concurrency == 0) o.concurrency = 1;
  return o;
}

FunctionInstance::FunctionInstance(InstanceOptions options, BufferPool& pool,
                                   std::unique_ptr<DescriptorChannel> channel,
                                   std::unique_ptr<Handler> handler)
    : options_(std::move(options)),
      pool_(pool),
      channel_(std::move(channel)),
      handler_(std::move(handler)) {
  replies_.reserve(kReceiveBatch);  // at most one reply per received descriptor
  if (options_.concurrency > 1 && handler_->MayBlock()) {
    for (uint32_t i = 0; i < options_.concurrency; ++i) {
      workers_.emplace_back([this] { WorkerMain(); });
    }
  }
  // Load reports go straight out from the reporting thread (the channel's Send is safe from
  // several threads, as worker replies are).
  handler_->SetLoadReportSink([this](const LoadReport& r) {
    EventDescriptor d{};
    d.target = kManagerEndpoint;
    d.function_id = options_.function_id;
    d.source = options_.endpoint;
    d.request_id = options_.endpoint;
    d.version = kDescriptorVersion;
    d.timestamp_ns = MonotonicNs();
    WriteLoadReport(r, &d);
    Deliver(d);
  });
}

FunctionInstance::~FunctionInstance() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void FunctionInstance::WorkerMain() {
  for (;;) {
    EventDescriptor d;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      d = queue_.front();
      queue_.pop_front();
    }
    Process(d);
  }
}

void FunctionInstance::SendReply(EventDescriptor reply) {
  reply.version = kDescriptorVersion;
  reply.timestamp_ns = MonotonicNs();
  if (batching_) {
    replies_.push_back(reply);  // goes with the other replies of its batch (FlushReplies)
    return;
  }
  Deliver(reply);
}

void FunctionInstance::Deliver(const EventDescriptor& reply) {
  for (int attempt = 0;; ++attempt) {
    Status st = channel_->Send(reply);
    if (st.ok()) return;
    if (st.code() == StatusCode::kResourceExhausted && attempt < 1000) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    spdlog::warn("reply for request {} to endpoint {:#x} lost: {}", reply.request_id, reply.target,
                 st.ToString());
    // The buffer was handed to shoald's slot before the send: give it back from there.
    if (reply.offset != 0)
      ReleaseOrLog(pool_, reply.offset, kShoaldSlot, "lost reply's", "function instance");
    return;
  }
}

void FunctionInstance::FlushReplies() {
  for (size_t done = 0; done < replies_.size();) {
    Status st;
    done += channel_->SendMany(std::span<const EventDescriptor>(replies_).subspan(done), &st);
    // One that did not go: retried while the gateway's queue is full, else logged as lost.
    if (done < replies_.size()) Deliver(replies_[done++]);
  }
  replies_.clear();
}

void FunctionInstance::Process(const EventDescriptor& req) {
  EventDescriptor reply{};
  reply.target = req.source;
  reply.source = options_.endpoint;
  reply.function_id = req.function_id;
  reply.request_id = req.request_id;

  PayloadView payload = ReadPayload(pool_.Data(req.offset));
  if (!payload.valid) {
    spdlog::warn("request {}: bad payload buffer at offset {}", req.request_id, req.offset);
    reply.kind = static_cast<uint16_t>(EventKind::kError);
    reply.status = 500;
    SendReply(reply);
    return;
  }
  Request request = MakeRequest(payload, req);
  request.client_gone = req.status == kStatusClientGone;

  ResponseBuilder response(pool_, options_.slot, req.offset);
  response.SetPieceSink([this, &reply](uint64_t offset, uint64_t length, int status) {
    EventDescriptor piece = reply;
    piece.kind = static_cast<uint16_t>(EventKind::kResponseChunk);
    piece.offset = offset;
    piece.length = length;
    piece.status = static_cast<uint32_t>(status);
    SendReply(piece);
  });
  Status st = handler_->Handle(request, response);
  if (response.aux_changed()) reply.aux_offset = req.aux_offset;
  if (!st.ok() && response.streamed()) {
    // The client has the status already: the stream just ends (the handler said why in it).
    spdlog::warn("request {}: streamed answer ended by an error: {}", req.request_id,
                 st.ToString());
    response.Discard();
  } else if (!st.ok()) {
    const int http = st.code() == StatusCode::kInternal ? 500 : HttpStatusFor(st.code());
    std::string json = "{\"error\":\"" + JsonEscape(st.message()) + "\"}\n";
    response.Discard();
    response.SetStatus(http);
    auto out = response.Allocate(json.size(), "application/json");
    if (out.ok()) std::memcpy(out->data(), json.data(), json.size());
  }
  auto sealed = response.Finish();
  if (!sealed.ok()) {
    // Pool full: answer without a payload; the gateway maps the status to its HTTP error.
    ReleaseOrLog(pool_, req.offset, options_.slot, "request", "function instance");
    reply.kind = static_cast<uint16_t>(EventKind::kError);
    reply.status = static_cast<uint32_t>(HttpStatusFor(sealed.status().code()));
    SendReply(reply);
    return;
  }
  auto [offset, length] = *sealed;
  // Hand the response to shoald before sending its descriptor: if this process dies after
  // the send, the buffer is already the gateway's.
  if (Status t = pool_.Transfer(offset, options_.slot, kShoaldSlot); !t.ok()) {
    // The gateway could not free a buffer it does not hold: answer 500 without it.
    spdlog::error("request {}: transfer of response failed: {}", req.request_id, t.ToString());
    ReleaseOrLog(pool_, offset, options_.slot, "response", "function instance");
    reply.kind = static_cast<uint16_t>(EventKind::kError);
    reply.status = 500;
    SendReply(reply);
    return;
  }
  reply.kind = static_cast<uint16_t>(EventKind::kResponse);
  reply.status = static_cast<uint32_t>(response.status());
  reply.offset = offset;
  reply.length = length;
  SendReply(reply);
}

int FunctionInstance::Run() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = channel_->fd();
  epoll_ctl(ep, EPOLL_CTL_ADD, channel_->fd(), &ev);
  ev.data.fd = sfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
  if (options_.lifeline_fd >= 0) {
    ev.data.fd = options_.lifeline_fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, options_.lifeline_fd, &ev);
  }

  EventDescriptor ready{};
  ready.target = kManagerEndpoint;
  ready.kind = static_cast<uint16_t>(EventKind::kReady);
  ready.function_id = options_.function_id;
  ready.source = options_.endpoint;
  ready.request_id = options_.endpoint;
  SendReply(ready);
  spdlog::info("ready: function {} endpoint {:#x} pool {} slot {} concurrency {} dataplane {}",
               options_.function, options_.endpoint, options_.pool, options_.slot,
               options_.concurrency, options_.dataplane);

  std::array<EventDescriptor, kReceiveBatch> batch;
  int exit_code = 0;
  bool running = true;
  while (running) {
    epoll_event events[3];
    const int n = epoll_wait(ep, events, 3, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      exit_code = 1;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == sfd) {
        signalfd_siginfo si;
        (void)!read(sfd, &si, sizeof si);
        spdlog::info("signal {}: draining and exiting", si.ssi_signo);
        running = false;
        continue;
      }
      if (events[i].data.fd == options_.lifeline_fd) {
        spdlog::warn("shoald is gone (lifeline closed): exiting");
        exit_code = 1;
        running = false;
        continue;
      }
      for (;;) {
        auto got = channel_->Receive(batch);
        if (!got.ok()) {
          spdlog::info("data-plane socket closed: exiting");
          running = false;
          break;
        }
        if (*got == 0) break;
        // Inline requests answer together: one sendmmsg for the batch's replies.
        batching_ = workers_.empty();
        uint64_t last_ns = batching_ ? MonotonicNs() : 0;
        for (size_t k = 0; k < *got; ++k) {
          const EventDescriptor& d = batch[k];
          if (d.kind == static_cast<uint16_t>(EventKind::kPing)) {
            EventDescriptor pong = d;
            pong.target = d.source;
            pong.source = options_.endpoint;
            pong.kind = static_cast<uint16_t>(EventKind::kPong);
            SendReply(pong);
          } else if (d.kind == static_cast<uint16_t>(EventKind::kJobCommitted)) {
            if (d.source == kManagerEndpoint) handler_->OnJobCommitted(d.request_id);
          } else if (d.kind == static_cast<uint16_t>(EventKind::kBodyChunk)) {
            // In order with the requests on this loop; handlers on workers wait for Handle.
            if (workers_.empty()) ProcessBodyChunk(d);
          } else if (d.kind != static_cast<uint16_t>(EventKind::kRequest)) {
            spdlog::warn("unexpected descriptor kind {} from {:#x}", d.kind, d.source);
          } else if (workers_.empty()) {
            if (quick_streak_ < kQuickStreak) FlushReplies();
            Process(d);
            const uint64_t now = replies_.empty() ? MonotonicNs() : replies_.back().timestamp_ns;
            quick_streak_ =
                now - last_ns > kQuickHandlerNs ? 0 : std::min(quick_streak_ + 1, kQuickStreak);
            last_ns = now;
          } else {
            {
              std::lock_guard lock(mu_);
              queue_.push_back(d);
            }
            cv_.notify_one();
          }
        }
        batching_ = false;
        FlushReplies();
        // A short batch emptied the socket (level-triggered epoll says when more comes).
        if (*got < batch.size()) break;
      }
    }
  }
  close(ep);
  close(sfd);
  return exit_code;  // the destructor drains the workers' queue
}

}  // namespace shoal
