// One streamed OpenAI completion over its own loopback connection, as the language-model benches
// send them (bench-llm, bench-llm-autoscale): the time to the first server-sent event and the
// usage of the last event that carries one.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace shoal::bench {

struct Answer {
  bool ok = false;
  double ttft_s = 0;
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// One streamed completion over its own connection: time to the first SSE event, and the usage
// from the last event that carries one.
inline Answer Stream(uint16_t port, const std::string& path, const std::string& body) {
  Answer a;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return a;
  timeval tv{120, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto t0 = std::chrono::steady_clock::now();
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return a;
  }
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Connection: close\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return a;
  }
  std::string got;
  char buf[16384];
  bool first = false;
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    if (!first && got.find("data: {") != std::string::npos) {
      first = true;
      a.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  close(fd);
  const size_t u = got.rfind("\"completion_tokens\":");
  const size_t p = got.rfind("\"prompt_tokens\":");
  if (!first || u == std::string::npos || p == std::string::npos ||
      got.find("data: [DONE]") == std::string::npos || got.compare(0, 12, "HTTP/1.1 200") != 0) {
    std::fprintf(stderr, "bench: bad answer from port %u: %.300s\n", port, got.c_str());
    return a;
  }
  a.completion_tokens = std::atoi(got.c_str() + u + 20);
  a.prompt_tokens = std::atoi(got.c_str() + p + 16);
  a.ok = true;
  return a;
}

}  // namespace shoal::bench
