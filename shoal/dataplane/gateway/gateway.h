// The gateway: shoald's HTTP/1.1 front door. One libuv event loop per core, each with its own
// SO_REUSEPORT listener and its own data-plane endpoint. A request to /fn/<name> has its body
// received straight into a buffer of the function's shared-memory pool and is handed to an
// instance by a 64-byte descriptor; /metrics, /healthz and /readyz are served here. Of /v1,
// only the FL clients' routes (the "fleet" routes: job status, join, task, model, eval and
// updates) are served on this public listener, each with a bearer token; the rest of the control
// API has a listener of its own (ControlServer). The fleet routes other than the update run on
// control threads, never on a loop. A function whose manifest says `auth: token` answers /fn
// and /v2 only to a token that may invoke it. In cluster mode, a request for a function that
// runs only on other nodes is forwarded to one of them (hooks.forward, peer_links.h).
// In src/: connection (reading, routing, writing), routes (the route table), gateway_loop
// (dispatch to instances, with pending_requests, descriptor_outbox, loop_inbox, fl_tickets),
// response_head, control_worker, http_request_parser, peer_links (forwarding).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/dataplane/channel/dataplane.h"
#include "shoal/interfaces/fl_data_path.h"
#include "shoal/interfaces/forward_table.h"
#include "shoal/interfaces/http_reply.h"
#include "shoal/interfaces/request_sink.h"
#include "shoal/runtime/node/function_runtime.h"
#include "shoal/runtime/node/node_metrics.h"
#include "shoal/security/auth/token_store.h"

namespace shoal {

// A service for a path prefix that is not the data path (the FL clients' control routes).
class HttpService {
 public:
  virtual ~HttpService() = default;
  // Runs on a control thread (never on a gateway loop); called from several at once.
  virtual HttpReply Handle(std::string_view method, std::string_view path, std::string_view query,
                           std::string_view body, const auth::Principal& who,
                           const ServiceHeaders& headers) = 0;
};

// Whether `method path` is one of the FL clients' routes that the public listener serves:
// GET /v1/jobs/{job}, POST .../join, GET .../task, GET .../model, POST .../eval,
// POST .../updates. Sets `*job` to the job's name.
bool IsFleetRoute(std::string_view method, std::string_view path, std::string* job);

struct GatewayHooks {
  HttpService* control = nullptr;             // the fleet routes of /v1/jobs
  auth::TokenStore* tokens = nullptr;         // bearer tokens (fleet routes, auth: token)
  std::function<std::string()> metrics_text;  // /metrics
  std::function<bool()> ready;                // /readyz
  std::function<std::string()> ready_detail;  // more lines for /readyz (the etcd link)
  FlDataPath* fl = nullptr;                   // POST /v1/jobs/{job}/updates
  ForwardTable* forward = nullptr;            // cluster mode: where other nodes' functions run
};

class GatewayLoop;
class Connection;
class ControlWorker;

class Gateway final : public RequestSink {
 public:
  Gateway(const NodeConfig& config, FunctionTable& functions, DataPlane& dataplane,
          ScaleSignal& scale, NodeMetrics& metrics, GatewayHooks hooks);
  ~Gateway() override;

  // Creates the loops' endpoints and listeners and starts their threads.
  Status Start();
  void Stop();
  uint16_t port() const { return port_; }
  uint32_t loops() const;

  // RequestSink (called from the instance manager's thread).
  void Deliver(const RouteAssignment& assignment) override;
  void Reject(uint32_t loop, uint64_t request_id, int http_status, std::string reason) override;
  void FailInstance(uint32_t instance, int http_status, std::string reason) override;

 private:
  friend class GatewayLoop;
  friend class Connection;
  const NodeConfig& config_;
  FunctionTable& functions_;
  DataPlane& dataplane_;
  ScaleSignal& scale_;
  NodeMetrics& metrics_;
  GatewayHooks hooks_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<GatewayLoop>> loops_;
  std::unique_ptr<ControlWorker> control_worker_;  // the fleet routes' calls (hooks_.control)
};

}  // namespace shoal
