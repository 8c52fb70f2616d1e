// The control API's listener: HTTP/1.1 (HTTPS with a configured certificate) on its own
// threads, loopback by default. Every request must carry `Authorization: Bearer <token>`; the
// token store turns it into a Principal (401 otherwise) and ControlApi checks the role (403).
// Nothing here runs on a gateway loop, so a deploy's fsync or a checkpoint read never stalls
// the data path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "shoal/auth/token_store.h"
#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/controller/control_api.h"

namespace httplib {
class Server;
}

namespace shoal {

class ControlServer {
 public:
  ControlServer(const NodeConfig& config, ControlApi& api, auth::TokenStore& tokens);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Binds (refusing a non-loopback address without TLS unless control_allow_insecure) and
  // starts serving on a thread of its own.
  Status Start();
  void Stop();
  uint16_t port() const { return port_; }
  // "http://127.0.0.1:8081" or "https://...".
  std::string url() const;

 private:
  const NodeConfig& config_;
  ControlApi& api_;
  auth::TokenStore& tokens_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  uint16_t port_ = 0;
  bool tls_ = false;
};

// Whether `host` names only this machine (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);

}  // namespace shoal
