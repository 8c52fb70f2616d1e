// The control API's listener: HTTP/1.1 (HTTPS with a configured certificate) on its own
// threads, loopback by default. Every /v1 request must carry `Authorization: Bearer <token>`;
// the token store turns it into a Principal (401 otherwise) and ControlApi checks the role (403).
// It also serves the web console's static page at /ui/ (no data in it, so no token).
// Nothing here runs on a gateway loop, so a deploy's fsync or a checkpoint read never stalls
// the data path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "shoal/auth/token_store.h"
#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/controller/control_api.h"

namespace httplib {
class Server;
struct Response;
}

namespace shoal {

class ControlServer {
 public:
  ControlServer(const NodeConfig& config, ControlApi& api, auth::TokenStore& tokens);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Where the node's gateway answers /v2 (http://127.0.0.1:8080): GET /v1/models/{m}/stats
  // reads an inference model's stats from it for the web console. Before Start.
  void SetGatewayUrl(std::string url) { gateway_url_ = std::move(url); }

  // Binds (refusing a non-loopback address without TLS unless control_allow_insecure) and
  // starts serving on a thread of its own.
  Status Start();
  void Stop();
  uint16_t port() const { return port_; }
  // "http://127.0.0.1:8081" or "https://...".
  std::string url() const;

 private:
  static void Write(HttpReply r, httplib::Response& res);
  HttpReply ModelStats(const std::string& method, const std::string& path,
                       const auth::Principal& who);

  const NodeConfig& config_;
  ControlApi& api_;
  auth::TokenStore& tokens_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string gateway_url_;
  uint16_t port_ = 0;
  bool tls_ = false;
};

// Whether `host` names only this machine (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);

}  // namespace shoal
