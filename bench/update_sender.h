// Raw-socket HTTP/1.1 uploads for bench-ingest and bench-round: the body goes out with writev
// from buffers built before the clock starts (a per-client prefix + one shared tensor area),
// so the sender costs the same bytes as the plain TCP anchor it is compared with.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shoal/fl/wire/update_format.h"
#include "tcp_connect.h"

namespace shoal::bench {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A client's update prefix: magic, header length, the serialized header and the padding up to
// the tensor area (whose offsets the header's tensor table gives), so that one tensor area built
// once can follow every client's prefix.
inline std::string UpdatePrefix(const std::string& header) {
  const uint32_t hlen = static_cast<uint32_t>(header.size());
  std::string prefix(model::TensorAreaOffset(hlen), '\0');
  std::memcpy(prefix.data(), model::kUpdateMagic, 4);
  std::memcpy(prefix.data() + 4, &hlen, 4);
  std::memcpy(prefix.data() + 8, header.data(), header.size());
  return prefix;
}

inline int ConnectLoopback(uint16_t port) { return ConnectTcp("127.0.0.1", port); }

// Writes every byte of the pieces; false on a socket error.
inline bool WriteAll(int fd, std::vector<iovec> iov) {
  size_t i = 0;
  while (i < iov.size()) {
    ssize_t n = writev(fd, iov.data() + i, static_cast<int>(std::min<size_t>(iov.size() - i, 64)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = static_cast<size_t>(n);
    while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
    if (i < iov.size()) {
      iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
      iov[i].iov_len -= left;
    }
  }
  return true;
}

// Reads one HTTP response (Content-Length bodies only); returns its status, 0 on error.
inline int ReadResponse(int fd, std::string* body = nullptr) {
  std::string buf;
  char tmp[4096];
  size_t head_end = std::string::npos;
  while (head_end == std::string::npos) {
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0) return 0;
    buf.append(tmp, static_cast<size_t>(n));
    head_end = buf.find("\r\n\r\n");
  }
  const int status = std::atoi(buf.c_str() + 9);
  size_t len = 0;
  for (const char* key : {"Content-Length: ", "content-length: "}) {
    auto p = buf.find(key);
    if (p != std::string::npos && p < head_end)
      len = std::strtoull(buf.c_str() + p + 16, nullptr, 10);
  }
  while (buf.size() < head_end + 4 + len) {
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0) return 0;
    buf.append(tmp, static_cast<size_t>(n));
  }
  if (body) *body = buf.substr(head_end + 4, len);
  return status;
}

// `extra_header` ("Name: value", e.g. the bearer token) is sent when not empty.
inline std::string PostHead(const std::string& path, size_t length,
                            const std::string& extra_header = {}) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n" +
         (extra_header.empty() ? std::string() : extra_header + "\r\n") +
         "Content-Length: " + std::to_string(length) + "\r\n\r\n";
}

// One request: `head`, then a client's update prefix, then the tensor area all clients share.
// False on a socket error.
inline bool WriteUpdate(int fd, const std::string& head, const std::string& prefix,
                        const std::vector<std::byte>& area) {
  return WriteAll(fd, {{const_cast<char*>(head.data()), head.size()},
                       {const_cast<char*>(prefix.data()), prefix.size()},
                       {const_cast<std::byte*>(area.data()), area.size()}});
}

// An update posted to /v1/jobs/<job>/updates and its answer (status 0: no answer).
struct PostedUpdate {
  bool sent = false;  // every byte written
  int status = 0;
  std::string body;
  double write_start = 0, write_end = 0;  // Now() around the writes
};
inline PostedUpdate PostUpdate(int fd, const std::string& job, const std::string& prefix,
                               const std::vector<std::byte>& area, const std::string& auth) {
  PostedUpdate p;
  const std::string head =
      PostHead("/v1/jobs/" + job + "/updates", prefix.size() + area.size(), auth);
  p.write_start = Now();
  p.sent = WriteUpdate(fd, head, prefix, area);
  p.write_end = Now();
  p.status = ReadResponse(fd, &p.body);
  return p;
}

}  // namespace shoal::bench
