// An in-process stand-in for shoald's FL job protocol on a real loopback socket: synchronous
// FedAvg over an in-memory model, with scripted faults (a 503 with Retry-After, a 409) and a
// record of everything the clients sent, for tests of shoal-client and its library.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::client::testing {

struct FakeFlConfig {
  std::string job = "fmnist";
  model::ModelSpec spec = model::MlpSpec(16, {8}, 4);
  int clients = 2;
  uint64_t final_version = 3;  // the job is done once this version is committed
  uint32_t local_steps = 5;
  double learning_rate = 0.1;
  uint32_t batch_size = 8;
  // Expected num_samples per client name ("client-0", ...); empty: not checked.
  std::map<std::string, uint64_t> partition_sizes;
  // Expected train_seconds per client name; empty: not checked.
  std::map<std::string, double> train_seconds;
  bool first_task_waits = true;            // each client's first task is "wait"
  std::string answer_503_to = "client-0";  // its first update gets 503, Retry-After: 1
  std::string answer_409_to = "client-1";  // its first update gets 409
};

struct ReceivedUpdate {
  std::string client_name;
  uint64_t base_version = 0;
  int status = 0;
  std::string body;
};

struct ReceivedEval {
  std::string client_id, token;
  uint64_t version = 0;
  double accuracy = -1, loss = -1;
  uint64_t samples = 0;
};

class FakeFlServer {
 public:
  explicit FakeFlServer(FakeFlConfig config) : c_(std::move(config)) {
    models_[0] = model::InitModel(c_.spec, 7).values;
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeFlServer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : conns_) t.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // What the clients did, for assertions (copies, under the lock).
  std::vector<std::string> errors() const { return Locked(errors_); }
  std::vector<ReceivedUpdate> updates() const { return Locked(updates_); }
  std::vector<ReceivedEval> evals() const { return Locked(evals_); }
  std::map<uint64_t, int> model_downloads() const { return Locked(downloads_); }
  std::map<std::string, int> waits_sent() const { return Locked(waits_); }
  std::map<std::string, int> dones_sent() const { return Locked(dones_); }
  std::map<std::string, std::vector<std::string>> events() const { return Locked(events_); }
  uint64_t version() const { return Locked(version_); }
  std::string id_of(const std::string& name) const { return Locked(ids_).at(name); }
  std::string token_of(const std::string& name) const { return Locked(tokens_).at(name); }

 private:
  using json = nlohmann::json;
  struct Response {
    int status = 200;
    std::string body;
    std::vector<std::string> headers;
  };

  template <typename T>
  T Locked(const T& v) const {
    std::lock_guard lock(mu_);
    return v;
  }

  void AcceptLoop() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      std::lock_guard lock(mu_);
      conn_fds_.push_back(fd);
      conns_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  // Keep-alive: requests one after another on the connection until the client closes it.
  void Serve(int fd) {
    std::string buf;
    char chunk[65536];
    for (;;) {
      size_t head_end;
      while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) return Close(fd);
        buf.append(chunk, static_cast<size_t>(n));
      }
      const std::string head = buf.substr(0, head_end);
      size_t content_length = 0;
      std::string lower = head;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (size_t p = lower.find("content-length:"); p != std::string::npos) {
        content_length = std::stoul(lower.substr(p + 15));
      }
      while (buf.size() < head_end + 4 + content_length) {
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) return Close(fd);
        buf.append(chunk, static_cast<size_t>(n));
      }
      const std::string body = buf.substr(head_end + 4, content_length);
      buf.erase(0, head_end + 4 + content_length);
      const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
      const std::string method = head.substr(0, sp1);
      const std::string target = head.substr(sp1 + 1, sp2 - sp1 - 1);
      Response r = Handle(method, target, body);
      std::string out = "HTTP/1.1 " + std::to_string(r.status) +
                        " X\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
      for (const std::string& h : r.headers) out += h + "\r\n";
      out += "\r\n" + r.body;
      size_t sent = 0;
      while (sent < out.size()) {
        const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return Close(fd);
        sent += static_cast<size_t>(n);
      }
    }
  }
  void Close(int fd) {
    std::lock_guard lock(mu_);
    ::close(fd);
    std::erase(conn_fds_, fd);
  }

  static std::map<std::string, std::string> Query(const std::string& target) {
    std::map<std::string, std::string> q;
    const size_t p = target.find('?');
    if (p == std::string::npos) return q;
    std::string rest = target.substr(p + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      size_t amp = rest.find('&', start);
      if (amp == std::string::npos) amp = rest.size();
      const std::string kv = rest.substr(start, amp - start);
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) q[kv.substr(0, eq)] = kv.substr(eq + 1);
      start = amp + 1;
    }
    return q;
  }

  static Response Error(int status, const std::string& message) {
    return {status, json{{"error", message}}.dump(), {}};
  }

  std::string NameOf(const std::string& id) const {
    for (const auto& [name, i] : ids_) {
      if (i == id) return name;
    }
    return "";
  }

  Response Handle(const std::string& method, const std::string& target, const std::string& body) {
    std::lock_guard lock(mu_);
    const std::string prefix = "/v1/jobs/" + c_.job;
    const std::string path = target.substr(0, target.find('?'));
    if (!path.starts_with("/v1/jobs/")) return Error(404, "no route " + path);
    if (path != prefix && !path.starts_with(prefix + "/")) {
      return Error(404, "job '" + path.substr(9, path.find('/', 9) - 9) + "' not found");
    }
    const std::string op = path.substr(prefix.size());
    const auto q = Query(target);
    const bool done = version_ >= c_.final_version;

    if (method == "GET" && op.empty()) {
      return {200, json{{"state", done ? "done" : "running"}, {"version", version_}}.dump(), {}};
    }
    if (method == "POST" && op == "/join") {
      auto j = json::parse(body, nullptr, false);
      if (!j.is_object() || !j.contains("name")) return Error(400, "join needs a name");
      const std::string name = j["name"];
      ids_[name] = "id-" + name;
      tokens_[name] = "tok-" + name;
      events_[name].push_back("join");
      return {200, json{{"client_id", ids_[name]}, {"token", tokens_[name]}}.dump(), {}};
    }
    if (method == "GET" && op == "/task") {
      const std::string name = NameOf(q.count("client") ? q.at("client") : "");
      if (name.empty()) return Error(404, "unknown client");
      if (q.count("token") == 0 || q.at("token") != tokens_[name]) return Error(401, "bad token");
      events_[name].push_back("task");
      if (done) {
        ++dones_[name];
        return {200, R"({"kind":"done"})", {}};
      }
      const bool first = waits_.count(name) == 0;
      if ((c_.first_task_waits && first) || submitted_.count(name) > 0) {
        ++waits_[name];
        return {200, R"({"kind":"wait","retry_after_ms":20})", {}};
      }
      return {200,
              json{{"kind", "train"},
                   {"model_version", version_},
                   {"local_steps", c_.local_steps},
                   {"learning_rate", c_.learning_rate},
                   {"batch_size", c_.batch_size}}
                  .dump(),
              {}};
    }
    if (method == "GET" && op == "/model") {
      const uint64_t v = std::stoull(q.count("version") ? q.at("version") : "0");
      auto it = models_.find(v);
      if (it == models_.end()) return Error(404, "no version " + std::to_string(v));
      ++downloads_[v];
      // Tensors in reverse data order: the client must place them by name.
      model::Model m(c_.spec);
      m.values = it->second;
      std::vector<model::SafetensorsEntry> entries;
      for (size_t i = c_.spec.size(); i-- > 0;) {
        auto t = m.tensor(i);
        entries.push_back({c_.spec.tensor(i).name, model::DType::kF32, c_.spec.tensor(i).shape,
                           std::as_bytes(t)});
      }
      auto file = model::WriteSafetensors(entries);
      return {200,
              std::string(reinterpret_cast<const char*>(file->data()), file->size()),
              {"X-Shoal-Model-Version: " + std::to_string(v)}};
    }
    if (method == "POST" && op == "/updates") {
      return HandleUpdate(body);
    }
    if (method == "POST" && op == "/eval") {
      auto j = json::parse(body, nullptr, false);
      if (!j.is_object()) return Error(400, "eval: not JSON");
      ReceivedEval e;
      e.client_id = j.value("client_id", "");
      e.token = j.value("token", "");
      e.version = j.value("version", uint64_t{0});
      e.accuracy = j.value("accuracy", -1.0);
      e.loss = j.value("loss", -1.0);
      e.samples = j.value("samples", uint64_t{0});
      evals_.push_back(e);
      return {200, "{}", {}};
    }
    return Error(404, "no route " + method + " " + path);
  }

  Response HandleUpdate(const std::string& body) {
    auto view =
        model::ParseUpdate(std::as_bytes(std::span<const char>(body.data(), body.size())), c_.spec);
    if (!view.ok()) {
      errors_.push_back("ParseUpdate: " + view.status().message());
      return Error(400, view.status().message());
    }
    const model::UpdateMeta& m = view->meta;
    const std::string name = NameOf(m.client_id);
    ReceivedUpdate rec{name, m.base_version, 0, body};
    auto check = [&](bool ok, const std::string& what) {
      if (!ok) errors_.push_back(name + ": " + what);
    };
    check(!name.empty(), "unknown client_id " + m.client_id);
    check(m.job == c_.job, "job " + m.job);
    check(m.token == tokens_[name], "token " + m.token);
    check(m.local_steps == c_.local_steps, "local_steps " + std::to_string(m.local_steps));
    check(m.kind == model::UpdateKind::kWeights, "kind");
    check(m.base_version <= version_, "base_version from the future");
    if (auto it = c_.partition_sizes.find(name); it != c_.partition_sizes.end()) {
      check(m.num_samples == it->second, "num_samples " + std::to_string(m.num_samples));
    }
    if (auto it = c_.train_seconds.find(name); it != c_.train_seconds.end()) {
      check(std::abs(m.train_seconds - it->second) < 1e-9,
            "train_seconds " + std::to_string(m.train_seconds));
    }
    check(view->tensors.size() == c_.spec.size(), "tensor count");
    for (size_t i = 0; i < view->tensors.size() && i < c_.spec.size(); ++i) {
      const auto& t = view->tensors[i];
      check(t.name == c_.spec.tensor(i).name &&
                std::vector<uint64_t>(t.shape.begin(), t.shape.end()) == c_.spec.tensor(i).shape,
            "tensor " + std::string(t.name));
    }
    events_[name].push_back("update");

    Response r;
    if (name == c_.answer_503_to && !answered_503_) {
      answered_503_ = true;
      r = Error(503, "pool full");
      r.headers.push_back("Retry-After: 1");
    } else if (name == c_.answer_409_to && !answered_409_) {
      answered_409_ = true;
      r = Error(409, "too stale");
    } else if (m.base_version != version_) {
      r = Error(409, "too stale");
    } else {
      // FedAvg: weights by sample count; the round commits when every client has sent one.
      std::vector<float> w(c_.spec.num_params());
      for (const auto& t : view->tensors) {
        model::DecodeFloats(t.data, t.dtype, t.numel, w.data() + c_.spec.offset(t.index));
      }
      round_.push_back({std::move(w), static_cast<double>(m.num_samples)});
      submitted_.insert(name);
      if (static_cast<int>(round_.size()) == c_.clients) {
        double total = 0;
        for (const auto& [w_k, n] : round_) total += n;
        std::vector<float> avg(c_.spec.num_params(), 0.0F);
        for (const auto& [w_k, n] : round_) {
          for (size_t i = 0; i < avg.size(); ++i) avg[i] += static_cast<float>(n / total) * w_k[i];
        }
        models_[++version_] = std::move(avg);
        round_.clear();
        submitted_.clear();
      }
      r = {202, json{{"accepted", true}, {"version", version_}}.dump(), {}};
    }
    rec.status = r.status;
    updates_.push_back(std::move(rec));
    return r;
  }

  FakeFlConfig c_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::vector<std::thread> conns_;

  mutable std::mutex mu_;
  std::vector<int> conn_fds_;
  uint64_t version_ = 0;
  std::map<uint64_t, std::vector<float>> models_;
  std::vector<std::pair<std::vector<float>, double>> round_;
  std::set<std::string> submitted_;
  bool answered_503_ = false, answered_409_ = false;
  std::map<std::string, std::string> ids_, tokens_;
  std::vector<std::string> errors_;
  std::vector<ReceivedUpdate> updates_;
  std::vector<ReceivedEval> evals_;
  std::map<uint64_t, int> downloads_;
  std::map<std::string, int> waits_, dones_;
  std::map<std::string, std::vector<std::string>> events_;
};

}  // namespace shoal::client::testing
