// An open-loop HTTP load generator for latency at a fixed rate (what wrk2's -R does and wrk
// does not): request i is due at t0 + i / rate whatever the server does, and its latency is
// measured from that due time, not from when a connection was free to send it, so a server
// that falls behind is charged for the queue it causes (no coordinated omission). Bounded: at
// most `connections` requests in flight (a due request waits for a free connection, its clock
// running), sending stops after `seconds`, and whatever is still out `drain_s` later is counted
// as unanswered with its wait so far. One thread, epoll, a timerfd for the due times; the same
// request bytes every time (a whole HTTP/1.1 request with Content-Length, keep-alive).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "run_stats.h"

namespace shoal::bench {

struct OpenLoopResult {
  double offered_rps = 0;                     // the schedule's rate
  double answered_rps = 0;                    // 2xx answers / the sending window
  double p50_ms = 0, p99_ms = 0, max_ms = 0;  // over every due request, unanswered included
  long due = 0;                               // requests the schedule made due
  long ok = 0;                                // 2xx answers
  long non2xx = 0;                            // other statuses
  long unanswered = 0;  // not answered (or not even sent) by the end of the drain
  long reconnects = 0;  // connections the server closed and this reopened
};

namespace open_loop_detail {

inline int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Case-insensitive search for "\r\n<name>:" in the head; the value's first character or npos.
inline size_t HeaderValue(std::string_view head, std::string_view name) {
  for (size_t at = head.find("\r\n"); at != std::string_view::npos;
       at = head.find("\r\n", at + 2)) {
    const size_t start = at + 2;
    if (head.size() - start <= name.size() || head[start + name.size()] != ':') continue;
    bool same = true;
    for (size_t k = 0; same && k < name.size(); ++k) {
      same = std::tolower(static_cast<unsigned char>(head[start + k])) == name[k];
    }
    if (!same) continue;
    size_t v = start + name.size() + 1;
    while (v < head.size() && head[v] == ' ') ++v;
    return v;
  }
  return std::string_view::npos;
}

// The length of the whole HTTP response at the start of `in` (head and body, by Content-Length
// or chunked, without trailers: uvicorn sends KServe's binary answers chunked), 0 while it is
// incomplete; *status its status code.
inline size_t ResponseLength(std::string_view in, int* status) {
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return 0;
  const std::string_view head = in.substr(0, head_end + 2);
  *status = head.size() > 12 ? std::atoi(head.data() + 9) : 0;
  size_t at = head_end + 4;
  if (const size_t cl = HeaderValue(head, "content-length"); cl != std::string_view::npos) {
    const size_t body = std::strtoul(head.data() + cl, nullptr, 10);
    return in.size() >= at + body ? at + body : 0;
  }
  if (HeaderValue(head, "transfer-encoding") == std::string_view::npos) return 0;
  for (;;) {
    const size_t line_end = in.find("\r\n", at);
    if (line_end == std::string_view::npos) return 0;
    const size_t n = std::strtoul(in.data() + at, nullptr, 16);
    at = line_end + 2 + n + 2;  // the chunk and its CRLF (the last chunk's: the empty line)
    if (in.size() < at) return 0;
    if (n == 0) return at;
  }
}

struct Conn {
  int fd = -1;
  bool busy = false;
  int64_t due_ns = 0;  // of the request in flight on it
  size_t sent = 0;     // bytes of the request written so far
  std::string in;      // the answer so far
};

}  // namespace open_loop_detail

inline OpenLoopResult RunOpenLoop(uint16_t port, const std::string& request, double rate,
                                  double seconds, int connections, double drain_s = 5) {
  using namespace open_loop_detail;
  OpenLoopResult r;
  r.offered_rps = rate;
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  const int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  std::vector<Conn> conns(static_cast<size_t>(connections));
  auto open_conn = [&](size_t i) {
    Conn& c = conns[i];
    c = Conn{};
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(c.fd);
      c.fd = -1;
      return false;
    }
    fcntl(c.fd, F_SETFL, O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    return true;
  };
  for (size_t i = 0; i < conns.size(); ++i) open_conn(i);
  {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = UINT64_MAX;
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
  }

  std::vector<double> lat_ms;
  lat_ms.reserve(static_cast<size_t>(rate * seconds) + 16);
  std::deque<int64_t> waiting;  // due requests no connection has taken yet
  std::vector<size_t> idle;
  for (size_t i = 0; i < conns.size(); ++i)
    if (conns[i].fd >= 0) idle.push_back(i);
  const int64_t t0 = NowNs() + 1000000;
  const int64_t end_ns = t0 + static_cast<int64_t>(seconds * 1e9);
  const int64_t drain_end = end_ns + static_cast<int64_t>(drain_s * 1e9);
  const double gap_ns = 1e9 / rate;
  long next = 0;  // index of the next request to become due
  auto due_of = [&](long i) { return t0 + static_cast<int64_t>(static_cast<double>(i) * gap_ns); };

  auto write_some = [&](size_t i) {
    Conn& c = conns[i];
    while (c.sent < request.size()) {
      const ssize_t n = send(c.fd, request.data() + c.sent, request.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    epoll_event ev{};
    ev.events = c.sent < request.size() ? EPOLLIN | EPOLLOUT : EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
    return true;
  };
  // A connection lost with a request on it: the request is due again at its old due time.
  auto reopen = [&](size_t i) {
    Conn& c = conns[i];
    if (c.busy) waiting.push_front(c.due_ns);
    epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    ++r.reconnects;
    if (open_conn(i)) idle.push_back(i);
  };
  auto dispatch = [&] {
    while (!waiting.empty() && !idle.empty()) {
      const size_t i = idle.back();
      idle.pop_back();
      Conn& c = conns[i];
      c.busy = true;
      c.due_ns = waiting.front();
      waiting.pop_front();
      c.sent = 0;
      c.in.clear();
      if (!write_some(i)) reopen(i);
    }
  };
  // Whether conns[i] holds a whole answer; then it is recorded and the connection is idle.
  auto complete = [&](size_t i, int64_t now) {
    Conn& c = conns[i];
    int status = 0;
    const size_t length = ResponseLength(c.in, &status);
    if (length == 0) return false;
    if (status >= 200 && status < 300) {
      ++r.ok;
    } else {
      ++r.non2xx;
    }
    lat_ms.push_back(static_cast<double>(now - c.due_ns) / 1e6);
    c.busy = false;
    c.in.erase(0, length);
    idle.push_back(i);
    return true;
  };

  epoll_event events[64];
  char buf[65536];
  for (;;) {
    int64_t now = NowNs();
    while (now < end_ns && due_of(next) <= now) waiting.push_back(due_of(next++));
    dispatch();
    const bool sending = now < end_ns;
    long in_flight = 0;
    for (const Conn& c : conns) in_flight += c.busy ? 1 : 0;
    if (!sending && ((waiting.empty() && in_flight == 0) || now >= drain_end)) break;
    itimerspec its{};
    const int64_t wake = sending ? std::min(due_of(next), end_ns) : drain_end;
    its.it_value.tv_sec = wake / 1000000000;
    its.it_value.tv_nsec = wake % 1000000000;
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
    const int n = epoll_wait(ep, events, 64, -1);
    now = NowNs();
    for (int k = 0; k < n; ++k) {
      if (events[k].data.u64 == UINT64_MAX) {
        uint64_t expirations;
        [[maybe_unused]] ssize_t got = read(tfd, &expirations, sizeof expirations);
        continue;
      }
      const size_t i = events[k].data.u64;
      Conn& c = conns[i];
      if (c.fd < 0) continue;
      if ((events[k].events & EPOLLOUT) && c.busy && !write_some(i)) {
        reopen(i);
        continue;
      }
      if (!(events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      bool lost = false;
      for (;;) {
        const ssize_t got = recv(c.fd, buf, sizeof buf, 0);
        if (got > 0) {
          c.in.append(buf, static_cast<size_t>(got));
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        lost = true;  // closed by the server, or an error
        break;
      }
      const bool done = c.busy && complete(i, now);
      if (lost) {
        if (done) idle.erase(std::find(idle.begin(), idle.end(), i));
        reopen(i);
      }
    }
  }
  // What never got an answer counts at the wait it had so far (a lower bound).
  const int64_t stop = NowNs();
  for (int64_t due : waiting) lat_ms.push_back(static_cast<double>(stop - due) / 1e6);
  r.unanswered = static_cast<long>(waiting.size());
  for (Conn& c : conns) {
    if (c.busy) {
      lat_ms.push_back(static_cast<double>(stop - c.due_ns) / 1e6);
      ++r.unanswered;
    }
    if (c.fd >= 0) close(c.fd);
  }
  close(tfd);
  close(ep);
  r.due = next;
  r.answered_rps = static_cast<double>(r.ok) / seconds;
  r.p50_ms = Percentile(lat_ms, 0.50);
  r.p99_ms = Percentile(lat_ms, 0.99);
  r.max_ms = lat_ms.empty() ? 0 : *std::max_element(lat_ms.begin(), lat_ms.end());
  return r;
}

}  // namespace shoal::bench
