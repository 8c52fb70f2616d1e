// The nodes' FL peer links (cluster mode, LIFL's hierarchy across nodes): a small framed
// request/response protocol over persistent TCP connections between shoalds, on fl_peer_port.
// A node that folds a job's updates asks the job's top to admit each update (its header only)
// and reports it folded; the top asks each such node for its one partial sum of a round (the
// only large message: float32[params], written straight from the pool). Each frame:
//   "SHFP" | u32 kind | u32 json_len | u32 0 | u64 payload_len | json | payload
// A request's kind names the call; a reply's kind is an HTTP-like status (200, 4xx, 5xx) and
// its JSON carries "message" when it is not 200.
//
// Every link starts with a handshake proving the caller holds the cluster's peer secret (32
// random bytes the cluster's first node creates in etcd, <prefix>/peer-secret; etcd is the
// trust root, as for the cluster's tokens): the server sends a challenge frame (kind
// kFlPeerChallenge, payload: 32 random bytes), the client answers a proof frame (kind
// kFlPeerProof, JSON {"node": its name}, payload: HMAC-SHA256(secret, nonce || node)), and the
// server answers 200 or 401 with a message and closes. The secret never crosses the wire.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::cluster {

class EtcdClient;

// kProbe: which of a top's admissions a member does not hold (FlMembers::Unknown).
enum class FlPeerCall : uint32_t { kSpec = 1, kAdmit = 2, kReport = 3, kPartial = 4, kProbe = 5 };
// The handshake's frames (see above).
inline constexpr uint32_t kFlPeerChallenge = 0x5348'0001;
inline constexpr uint32_t kFlPeerProof = 0x5348'0002;
inline constexpr size_t kFlPeerSecretBytes = 32;
inline constexpr size_t kFlPeerNonceBytes = 32;

// The cluster's peer secret at `key` (ClusterKeys::PeerSecret): read, or created (random, 64 hex
// digits) if absent; every node gets the same one. Returns the 32 raw bytes.
Result<std::string> LoadPeerSecret(EtcdClient& etcd, const std::string& key);
// HMAC-SHA256(secret, nonce || node): the proof a client sends.
std::string PeerProof(const std::string& secret, std::span<const std::byte> nonce,
                      const std::string& node);

struct FlPeerReply {
  int status = 200;
  std::string json;                    // a JSON object
  std::span<const std::byte> payload;  // valid while `keep` is held
  std::shared_ptr<void> keep;
};

class FlPeerServer {
 public:
  // Called on the connection's thread, one request at a time per connection.
  using Handler = std::function<FlPeerReply(FlPeerCall call, const std::string& json,
                                            std::span<const std::byte> payload)>;
  // Whether a connection from `ip` may talk to this node (the cluster's live nodes).
  using Allow = std::function<bool(const std::string& ip)>;
  FlPeerServer(Handler handler, Allow allow);
  ~FlPeerServer();
  Status Start(const std::string& host, uint16_t port);
  void Stop();
  uint16_t port() const { return port_; }
  // The cluster's peer secret (32 bytes). Until it is set every connection is refused.
  void SetSecret(std::string secret);
  // Connections refused by the handshake since start.
  uint64_t refused() const { return refused_.load(); }
  // Whether the node a handshake proved (`node`, holding the secret) is the one at `ip` (its
  // registered address): a node may not speak for another. Unset: not checked. Set before
  // Start.
  using NodeAt = std::function<bool(const std::string& node, const std::string& ip)>;
  void SetNodeCheck(NodeAt check) { node_at_ = std::move(check); }

 private:
  void AcceptLoop();
  void Serve(int fd, std::string ip);
  // The handshake; false after answering the caller why (the link is then closed).
  bool Handshake(int fd, const std::string& ip);
  void Refuse(int fd, const std::string& ip, const std::string& why);
  Handler handler_;
  Allow allow_;
  NodeAt node_at_;
  std::atomic<uint64_t> refused_{0};
  std::mutex secret_mu_;
  std::string secret_;
  std::set<std::string> logged_;  // peers whose refusal was logged (under secret_mu_)
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  bool stopping_ = false;
  std::map<int, std::thread> conns_;  // by fd
  std::vector<std::thread> finished_;
};

class FlPeerClient {
 public:
  struct Response {
    int status = 0;
    std::string json;
  };
  FlPeerClient() = default;
  ~FlPeerClient();
  // Who this node is and the cluster's peer secret, for the handshake of each new link. Until
  // set, every call fails (kUnavailable).
  void SetIdentity(std::string node, std::string secret);
  // One call to the node at `address` ("ip:port"); an error when no reply came (unreachable,
  // closed, `timeout_s` without progress). A reply's payload goes to the buffer `into(len)`
  // returns (it must hold `len` bytes; a null span refuses the payload), or is dropped.
  Result<Response> Call(const std::string& address, FlPeerCall call, const std::string& json,
                        std::span<const std::byte> payload, double timeout_s,
                        const std::function<std::span<std::byte>(uint64_t)>& into = {});

 private:
  int Take(const std::string& address, double timeout_s, bool* reused, Status* why);
  Status Handshake(int fd, const std::string& address);
  void Give(const std::string& address, int fd);
  std::mutex mu_;
  std::string node_, secret_;  // under mu_
  std::map<std::string, std::vector<int>> idle_;
};

}  // namespace shoal::cluster
