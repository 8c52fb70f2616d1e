// The plain-TCP anchor of bench-ingest and bench-round: a loopback receiver that, on each
// connection, reads an HTTP head, then Content-Length bytes straight into a buffer touched in
// advance (like the pool's pages), and answers one small response. One thread per connection,
// blocking reads: no parsing, no copies beyond the socket's own, nothing done with the bytes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/loopback.h"

namespace shoal::bench {

class TcpSink {
 public:
  // Bodies up to max_body bytes, on up to `connections` connections at a time.
  explicit TcpSink(size_t max_body, int connections = 1) {
    for (int i = 0; i < connections; ++i) {
      buffers_.emplace_back(max_body + 4096);
      std::memset(buffers_.back().data(), 0, buffers_.back().size());
    }
    listen_fd_ = shoal::testing::ListenLoopback(64, &port_);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~TcpSink() {
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    for (auto& t : served_) t.join();
  }
  TcpSink(const TcpSink&) = delete;
  TcpSink& operator=(const TcpSink&) = delete;

  uint16_t port() const { return port_; }
  // Body bytes received on all connections so far.
  uint64_t received() const { return received_.load(); }

 private:
  void Accept() {
    for (size_t i = 0;; ++i) {
      int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      if (i >= buffers_.size()) {  // more connections than buffers
        close(fd);
        continue;
      }
      served_.emplace_back([this, fd, i] { Serve(fd, buffers_[i]); });
    }
  }

  void Serve(int fd, std::vector<char>& buffer) {
    for (;;) {
      // The head first (small reads), then the body straight into the buffer.
      std::string head;
      char c;
      while (head.find("\r\n\r\n") == std::string::npos) {
        if (read(fd, &c, 1) != 1) {
          close(fd);
          return;
        }
        head += c;
      }
      auto p = head.find("Content-Length: ");
      size_t len = p == std::string::npos ? 0 : std::strtoull(head.c_str() + p + 16, nullptr, 10);
      size_t got = 0;
      while (got < len) {  // a body longer than the buffer wraps around (never, as used)
        const size_t at = got % buffer.size();
        ssize_t n = recv(fd, buffer.data() + at, std::min(len - got, buffer.size() - at), 0);
        if (n <= 0) {
          close(fd);
          return;
        }
        got += static_cast<size_t>(n);
      }
      received_ += got;
      static const char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
      if (write(fd, kOk, sizeof kOk - 1) < 0) break;
    }
    close(fd);
  }

  std::vector<std::vector<char>> buffers_;
  std::vector<std::thread> served_;
  std::atomic<uint64_t> received_{0};
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
};

}  // namespace shoal::bench
