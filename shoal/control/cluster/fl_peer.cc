#include "shoal/control/cluster/fl_peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "shoal/common/log.h"
#include "shoal/control/cluster/etcd_client.h"

namespace shoal::cluster {

namespace {

constexpr char kMagic[4] = {'S', 'H', 'F', 'P'};
constexpr uint32_t kMaxJson = 1u << 20;
constexpr uint64_t kMaxRequestPayload = 4ull << 20;  // requests carry an update's header at most
constexpr double kHandshakeTimeoutS = 5;

struct FrameHead {
  char magic[4];
  uint32_t kind;
  uint32_t json_len;
  uint32_t reserved;
  uint64_t payload_len;
};
static_assert(sizeof(FrameHead) == 24);

// Writes every byte of `iov` (partial writes resumed); false on error or timeout.
bool WriteAll(int fd, iovec* iov, int n) {
  while (n > 0) {
    const ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = static_cast<size_t>(w);
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// 1: read all `n`; 0: the peer closed before the first byte; -1: error, timeout or short.
int ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, p + got, n - got, 0);
    if (r == 0) return got == 0 ? 0 : -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += static_cast<size_t>(r);
  }
  return 1;
}

bool Drain(int fd, uint64_t n) {
  char sink[65536];
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof sink));
    if (ReadAll(fd, sink, k) != 1) return false;
    n -= k;
  }
  return true;
}

bool SendFrame(int fd, uint32_t kind, const std::string& json, std::span<const std::byte> payload) {
  FrameHead h{};
  std::memcpy(h.magic, kMagic, 4);
  h.kind = kind;
  h.json_len = static_cast<uint32_t>(json.size());
  h.payload_len = payload.size();
  iovec iov[3] = {{&h, sizeof h},
                  {const_cast<char*>(json.data()), json.size()},
                  {const_cast<std::byte*>(payload.data()), payload.size()}};
  return WriteAll(fd, iov, payload.empty() ? 2 : 3);
}

void SetTimeouts(int fd, double recv_s, double send_s) {
  auto tv = [](double s) {
    timeval t{};
    t.tv_sec = static_cast<time_t>(s);
    t.tv_usec = static_cast<suseconds_t>((s - std::floor(s)) * 1e6);
    return t;
  };
  const timeval r = tv(recv_s), w = tv(send_s);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &w, sizeof w);
}

// A handshake frame's JSON and payload (small: the proof's JSON names a node).
bool ReadSmall(int fd, const FrameHead& h, std::string* json, std::string* payload) {
  if (h.json_len > 4096 || h.payload_len > 4096) return false;
  json->resize(h.json_len);
  payload->resize(h.payload_len);
  return ReadAll(fd, json->data(), json->size()) == 1 &&
         ReadAll(fd, payload->data(), payload->size()) == 1;
}

std::string MessageOf(const std::string& json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  return j.is_object() ? j.value("message", std::string("no message")) : std::string("no message");
}

}  // namespace

Result<std::string> LoadPeerSecret(EtcdClient& etcd, const std::string& key) {
  unsigned char raw[kFlPeerSecretBytes];
  if (RAND_bytes(raw, sizeof raw) != 1) return Internal("RAND_bytes failed: no peer secret");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : raw) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  OPENSSL_cleanse(raw, sizeof raw);
  RangeResult current;
  auto created = etcd.PutIfAbsent(key, hex, 0, &current);
  if (!created.ok()) {
    return Unavailable("the cluster's peer secret (" + key + "): " + created.status().message());
  }
  const std::string text =
      *created ? hex : (current.kvs.empty() ? std::string() : current.kvs[0].value);
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  std::string secret;
  for (size_t i = 0; text.size() == 2 * kFlPeerSecretBytes && i < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) break;
    secret += static_cast<char>(hi << 4 | lo);
  }
  if (secret.size() != kFlPeerSecretBytes) {
    return InvalidArgument("the cluster's peer secret at " + key + " is not " +
                           std::to_string(2 * kFlPeerSecretBytes) + " lowercase hex digits");
  }
  return secret;
}

std::string PeerProof(const std::string& secret, std::span<const std::byte> nonce,
                      const std::string& node) {
  std::string msg(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  msg += node;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

// ---- server ---------------------------------------------------------------------------------

FlPeerServer::FlPeerServer(Handler handler, Allow allow)
    : handler_(std::move(handler)), allow_(std::move(allow)) {}

FlPeerServer::~FlPeerServer() { Stop(); }

void FlPeerServer::SetSecret(std::string secret) {
  std::lock_guard lock(secret_mu_);
  secret_ = std::move(secret);
}

void FlPeerServer::Refuse(int fd, const std::string& ip, const std::string& why) {
  ++refused_;
  {
    std::lock_guard lock(secret_mu_);
    if (logged_.insert(ip).second) {
      spdlog::warn("fl peer: connection from {} refused: {} (logged once per peer)", ip, why);
    }
  }
  const std::string json = nlohmann::json{
      {"code", static_cast<int>(StatusCode::kUnauthenticated)},
      {"message",
       "fl peer: " + why}}.dump();
  (void)SendFrame(fd, 401, json, {});
  // Closed after the caller has the message: what it sent unread would turn the close into a
  // reset that can overtake the answer.
  shutdown(fd, SHUT_WR);
  SetTimeouts(fd, 0.2, 0.2);
  char sink[4096];
  for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, 0) > 0; ++i) {
  }
}

bool FlPeerServer::Handshake(int fd, const std::string& ip) {
  std::string secret;
  {
    std::lock_guard lock(secret_mu_);
    secret = secret_;
  }
  if (secret.empty()) {
    Refuse(fd, ip, "this node has not read the cluster's peer secret from etcd yet");
    return false;
  }
  std::byte nonce[kFlPeerNonceBytes];
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce), sizeof nonce) != 1) {
    Refuse(fd, ip, "no randomness for the challenge");
    return false;
  }
  SetTimeouts(fd, kHandshakeTimeoutS, kHandshakeTimeoutS);
  if (!SendFrame(fd, kFlPeerChallenge, "{}", nonce)) return false;
  FrameHead h;
  if (ReadAll(fd, &h, sizeof h) != 1) {
    Refuse(fd, ip, "no answer to the peer challenge");
    return false;
  }
  std::string json, proof;
  if (std::memcmp(h.magic, kMagic, 4) != 0 || h.kind != kFlPeerProof) {
    Refuse(fd, ip,
           "the link did not start with the cluster's peer handshake (the challenge's proof)");
    return false;
  }
  if (!ReadSmall(fd, h, &json, &proof)) {
    Refuse(fd, ip, "a malformed peer proof");
    return false;
  }
  auto j = nlohmann::json::parse(json, nullptr, false);
  const std::string node = j.is_object() ? j.value("node", std::string()) : std::string();
  const std::string want = PeerProof(secret, nonce, node);
  if (proof.size() != want.size() || CRYPTO_memcmp(proof.data(), want.data(), want.size()) != 0) {
    Refuse(fd, ip,
           "node '" + node +
               "' failed the peer handshake: its proof does not match the cluster's peer secret");
    return false;
  }
  if (node_at_ && !node_at_(node, ip)) {
    Refuse(fd, ip,
           "node '" + node +
               "' holds the cluster's peer secret but is not the node registered "
               "at " +
               ip);
    return false;
  }
  if (!SendFrame(fd, 200, "{}", {})) return false;
  return true;
}

Status FlPeerServer::Start(const std::string& host, uint16_t port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return ErrnoStatus("fl peer: socket", errno);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (host.empty() || host == "0.0.0.0") {
    a.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return InvalidArgument("fl peer: '" + host + "' is not an IPv4 address");
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return ErrnoStatus("fl peer: binding " + host + ":" + std::to_string(port) + " (fl_peer_port)",
                       errno);
  }
  if (listen(listen_fd_, 64) != 0) return ErrnoStatus("fl peer: listen", errno);
  socklen_t len = sizeof a;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return {};
}

void FlPeerServer::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    for (auto& [fd, t] : conns_) {
      shutdown(fd, SHUT_RDWR);
      threads.push_back(std::move(t));
    }
    conns_.clear();
    for (auto& t : finished_) threads.push_back(std::move(t));
    finished_.clear();
  }
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void FlPeerServer::AcceptLoop() {
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    std::vector<std::thread> done;
    std::lock_guard lock(mu_);
    if (stopping_) {
      if (fd >= 0) close(fd);
      return;
    }
    done.swap(finished_);
    for (auto& t : done) t.join();  // threads that left Serve (they no longer take mu_)
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      spdlog::error("fl peer: accept: {}", std::strerror(errno));
      return;
    }
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    if (allow_ && !allow_(ip)) {
      spdlog::warn("fl peer: connection from {} refused: not a node of this cluster", ip);
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conns_.emplace(fd, std::thread([this, fd, who = std::string(ip)] { Serve(fd, who); }));
  }
}

void FlPeerServer::Serve(int fd, std::string ip) {
  const bool authenticated = Handshake(fd, ip);
  SetTimeouts(fd, 0, 60);  // idle links wait; a reply that cannot be sent in 60 s fails
  std::string json;
  std::vector<std::byte> payload;
  while (authenticated) {
    FrameHead h;
    if (ReadAll(fd, &h, sizeof h) != 1) break;
    if (std::memcmp(h.magic, kMagic, 4) != 0 || h.json_len > kMaxJson ||
        h.payload_len > kMaxRequestPayload) {
      spdlog::warn("fl peer: a malformed request from {}: link closed", ip);
      break;
    }
    json.resize(h.json_len);
    payload.resize(h.payload_len);
    if (ReadAll(fd, json.data(), json.size()) != 1 ||
        ReadAll(fd, payload.data(), payload.size()) != 1) {
      break;
    }
    FlPeerReply reply = handler_(static_cast<FlPeerCall>(h.kind), json, payload);
    if (!SendFrame(fd, static_cast<uint32_t>(reply.status), reply.json, reply.payload)) break;
  }
  {
    std::lock_guard lock(mu_);
    auto it = conns_.find(fd);
    if (it != conns_.end()) {
      finished_.push_back(std::move(it->second));
      conns_.erase(it);
    }
  }
  close(fd);
}

// ---- client ---------------------------------------------------------------------------------

FlPeerClient::~FlPeerClient() {
  for (auto& [addr, fds] : idle_) {
    for (int fd : fds) close(fd);
  }
}

void FlPeerClient::SetIdentity(std::string node, std::string secret) {
  std::lock_guard lock(mu_);
  node_ = std::move(node);
  secret_ = std::move(secret);
}

Status FlPeerClient::Handshake(int fd, const std::string& address) {
  std::string node, secret;
  {
    std::lock_guard lock(mu_);
    node = node_;
    secret = secret_;
  }
  if (secret.empty()) {
    return Unavailable("fl peer " + address + ": this node has no cluster peer secret yet");
  }
  FrameHead h;
  std::string json, nonce;
  auto broke = [&](const char* when) {
    return Unavailable(
        "fl peer " + address + ": the link broke off " + when + " (" +
        (errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : std::strerror(errno)) + ")");
  };
  if (ReadAll(fd, &h, sizeof h) != 1) return broke("before the peer's challenge");
  if (std::memcmp(h.magic, kMagic, 4) != 0 || !ReadSmall(fd, h, &json, &nonce)) {
    return Unavailable("fl peer " + address + ": a malformed challenge");
  }
  if (h.kind != kFlPeerChallenge) {
    return Unauthenticated("fl peer " + address + " refused the link (" + std::to_string(h.kind) +
                           "): " + MessageOf(json));
  }
  const std::string proof = PeerProof(secret, std::as_bytes(std::span(nonce)), node);
  if (!SendFrame(fd, kFlPeerProof, nlohmann::json{{"node", node}}.dump(),
                 std::as_bytes(std::span(proof)))) {
    return broke("sending the proof");
  }
  if (ReadAll(fd, &h, sizeof h) != 1) return broke("before the handshake's answer");
  if (std::memcmp(h.magic, kMagic, 4) != 0 || !ReadSmall(fd, h, &json, &nonce)) {
    return Unavailable("fl peer " + address + ": a malformed handshake answer");
  }
  if (h.kind != 200) {
    return Unauthenticated("fl peer " + address + " refused the link (" + std::to_string(h.kind) +
                           "): " + MessageOf(json));
  }
  return {};
}

int FlPeerClient::Take(const std::string& address, double timeout_s, bool* reused, Status* why) {
  {
    std::lock_guard lock(mu_);
    auto& fds = idle_[address];
    if (!fds.empty()) {
      const int fd = fds.back();
      fds.pop_back();
      *reused = true;
      return fd;
    }
  }
  *reused = false;
  const auto colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (colon == std::string::npos ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    *why = InvalidArgument("fl peer: '" + address + "' is not ipv4:port");
    return -1;
  }
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = ErrnoStatus("fl peer: socket", errno);
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    *why = Unavailable("fl peer " + address + ": " + std::strerror(errno));
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1 ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    *why = Unavailable("fl peer " + address + ": " +
                       (err != 0 ? std::string(std::strerror(err))
                                 : "no connection within " + std::to_string(timeout_s) + " s"));
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SetTimeouts(fd, timeout_s, timeout_s);
  if (Status st = Handshake(fd, address); !st.ok()) {
    *why = std::move(st);
    close(fd);
    return -1;
  }
  return fd;
}

void FlPeerClient::Give(const std::string& address, int fd) {
  std::lock_guard lock(mu_);
  auto& fds = idle_[address];
  if (fds.size() >= 16) {
    close(fd);
    return;
  }
  fds.push_back(fd);
}

Result<FlPeerClient::Response> FlPeerClient::Call(
    const std::string& address, FlPeerCall call, const std::string& json,
    std::span<const std::byte> payload, double timeout_s,
    const std::function<std::span<std::byte>(uint64_t)>& into) {
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    Status why;
    const int fd = Take(address, timeout_s, &reused, &why);
    if (fd < 0) return why;
    SetTimeouts(fd, timeout_s, timeout_s);
    FrameHead h;
    int got = -1;
    const bool sent = SendFrame(fd, static_cast<uint32_t>(call), json, payload);
    if (sent) got = ReadAll(fd, &h, sizeof h);
    if (got != 1) {
      const int err = errno;
      close(fd);
      // A pooled link the peer closed while it was idle (a restarted peer): once more on a fresh
      // one. Never after a reply that did not come in time: the peer may be serving the request
      // still, and a call is not idempotent (an admission sent twice was admitted once and then
      // refused as a duplicate, which left the first one in flight at the top for good).
      const bool closed = !sent || got == 0 || err == ECONNRESET || err == EPIPE;
      if (reused && attempt == 0 && closed) continue;
      return Unavailable("fl peer " + address + ": " +
                         (got == 0 ? std::string("closed the link")
                          : err == EAGAIN || err == EWOULDBLOCK
                              ? "no reply within " + std::to_string(timeout_s) + " s"
                              : std::string(std::strerror(err))));
    }
    if (std::memcmp(h.magic, kMagic, 4) != 0 || h.json_len > kMaxJson) {
      close(fd);
      return Unavailable("fl peer " + address + ": a malformed reply");
    }
    Response r;
    r.status = static_cast<int>(h.kind);
    r.json.resize(h.json_len);
    bool ok = ReadAll(fd, r.json.data(), r.json.size()) == 1;
    if (ok && h.payload_len > 0) {
      std::span<std::byte> dst = into ? into(h.payload_len) : std::span<std::byte>();
      if (dst.size() >= h.payload_len) {
        ok = ReadAll(fd, dst.data(), h.payload_len) == 1;
      } else {
        ok = Drain(fd, h.payload_len);
        if (ok && into && r.status == 200) {
          Give(address, fd);
          return Internal("fl peer " + address + ": a reply payload of " +
                          std::to_string(h.payload_len) + " bytes was not expected");
        }
      }
    }
    if (!ok) {
      close(fd);
      return Unavailable("fl peer " + address + ": the reply broke off");
    }
    Give(address, fd);
    return r;
  }
}

}  // namespace shoal::cluster
