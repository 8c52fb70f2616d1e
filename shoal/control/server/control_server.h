// The control API's listener: HTTP/1.1 (HTTPS with a configured certificate) on its own
// threads, loopback by default. Every /v1 request must carry `Authorization: Bearer <token>`;
// the token store turns it into a Principal (401 otherwise) and ControlApi checks the role (403).
// It also serves the web console's static page at /ui/ (no data in it, so no token) and the
// console's live updates, GET /v1/events: a server-sent-events stream of the node's snapshot
// every interval and of each FL commit, on a bounded number of the listener's threads.
// Nothing here runs on a gateway loop, so a deploy's fsync or a checkpoint read never stalls
// the data path.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/control/node/commit_feed.h"
#include "shoal/control/node/control_api.h"
#include "shoal/security/auth/token_store.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

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
  // Where the FL coordinator publishes its commits: each event stream then sends a `commit`
  // event as a version lands (without one, streams send only their periodic snapshots).
  // Outlives this server. Before Start.
  void SetCommitFeed(CommitFeed* feed) { commits_ = feed; }

  // Concurrent GET /v1/events streams; the next gets 503. Each holds one of the listener's
  // threads, and the listener has this many more than its request threads, so streams never
  // take the threads the rest of /v1 needs.
  static constexpr size_t kMaxEventStreams = 16;
  // How long a ticket of POST /v1/events/ticket may wait for its one connection.
  static constexpr std::chrono::seconds kTicketLifetime{30};

  // Binds (refusing a non-loopback address without TLS unless control_allow_insecure) and
  // starts serving on a thread of its own.
  Status Start();
  void Stop();
  uint16_t port() const { return port_; }
  // "http://127.0.0.1:8081" or "https://...".
  std::string url() const;

 private:
  static void Write(HttpReply r, httplib::Response& res);
  // POST /v1/events/ticket: a random one-connection ticket for the bearer token `bearer`.
  HttpReply IssueTicket(const std::string& method, const std::string& bearer,
                        const auth::Principal& who);
  // The bearer token a ticket stands for (the ticket is used up); empty for an unknown, used
  // or expired ticket.
  std::string RedeemTicket(const std::string& ticket);
  // GET /v1/events once its caller is known: the stream's headers and its content provider.
  void ServeEvents(const std::string& query, std::string bearer, httplib::Response& res);
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

  CommitFeed own_commits_;  // nobody publishes into it: streams only tick
  CommitFeed* commits_ = &own_commits_;
  std::atomic<size_t> streams_{0};
  std::atomic<bool> stopping_{false};
  struct Ticket {
    std::string bearer;
    std::chrono::steady_clock::time_point expires;
  };
  std::mutex tickets_mu_;
  std::map<std::string, Ticket> tickets_;
};

// Whether `host` names only this machine (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);

}  // namespace shoal
