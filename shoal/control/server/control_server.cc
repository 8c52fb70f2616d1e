#include "shoal/control/server/control_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "shoal/common/http/http_client.h"
#include "shoal/common/query_string.h"
#include "shoal/console/console_assets.h"
#include "shoal/control/schemas/schemas.h"

namespace shoal {
namespace {

constexpr size_t kControlThreads = 4;
constexpr const char* kEventsPath = "/v1/events";
constexpr const char* kTicketPath = "/v1/events/ticket";
constexpr const char* kOpenApiPath = "/v1/openapi.json";
// GET /v1/events?interval=S: the snapshot's period, within these bounds.
constexpr double kDefaultEventInterval = 1.0;
constexpr double kMinEventInterval = 0.2;
constexpr double kMaxEventInterval = 10.0;
// A stream looks at the server's stop flag at least this often.
constexpr auto kStopCheck = std::chrono::milliseconds(200);
// Tickets waiting for their connection; more are refused (a token holder cannot grow the map).
constexpr size_t kMaxTickets = 1024;

// One server-sent event: `data` is one line of JSON (dump(-1) writes no newline).
std::string SseEvent(std::string_view name, std::string_view data) {
  std::string e;
  e.reserve(data.size() + name.size() + 16);
  e.append("event: ").append(name).append("\ndata: ").append(data);
  while (!e.empty() && e.back() == '\n') e.pop_back();
  e.append("\n\n");
  return e;
}

// Holds one of the kMaxEventStreams places while a stream's provider lives.
class StreamSlot {
 public:
  explicit StreamSlot(std::atomic<size_t>& count) : count_(count) {}
  ~StreamSlot() { count_.fetch_sub(1); }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;

 private:
  std::atomic<size_t>& count_;
};

void JsonError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump(
                      -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                      "\n",
                  "application/json");
}

// A model name as /v2/models/{m} takes it (no '/', '?', '%' or spaces to smuggle a path).
bool ValidModelName(std::string_view m) {
  const auto allowed = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  };
  return !m.empty() && m.size() <= 253 && std::all_of(m.begin(), m.end(), allowed) && m != "." &&
         m != "..";
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

ControlServer::ControlServer(const NodeConfig& config, ControlApi& api, auth::TokenStore& tokens)
    : config_(config), api_(api), tokens_(tokens) {}

ControlServer::~ControlServer() { Stop(); }

std::string ControlServer::url() const {
  const std::string& h = config_.control_listen_host;
  const bool any = h.empty() || h == "0.0.0.0" || h == "::";
  const std::string host =
      any ? "127.0.0.1" : (h.find(':') != std::string::npos ? "[" + h + "]" : h);
  return std::string(tls_ ? "https" : "http") + "://" + host + ":" + std::to_string(port_);
}

Status ControlServer::Start() {
  tls_ = !config_.control_tls_cert.empty();
  if (!tls_ && !IsLoopbackHost(config_.control_listen_host) && !config_.control_allow_insecure) {
    return InvalidArgument(
        "control_listen_host '" + config_.control_listen_host +
        "' is beyond this host: set control_tls_cert and control_tls_key (HTTPS), or "
        "control_allow_insecure: true to send tokens in clear text");
  }
  if (tls_) {
    auto s = std::make_unique<httplib::SSLServer>(config_.control_tls_cert.c_str(),
                                                  config_.control_tls_key.c_str());
    if (!s->is_valid()) {
      return InvalidArgument("control_tls_cert/control_tls_key: cannot load " +
                             config_.control_tls_cert + " and " + config_.control_tls_key +
                             " (PEM certificate and its private key)");
    }
    server_ = std::move(s);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  // Event streams hold a thread each for their whole life: they get threads of their own.
  server_->new_task_queue = [] {
    return new httplib::ThreadPool(kControlThreads + kMaxEventStreams);
  };
  server_->set_payload_max_length(config_.max_body_bytes);
  server_->set_keep_alive_max_count(1000);
  server_->set_read_timeout(std::chrono::seconds(30));
  server_->set_write_timeout(std::chrono::seconds(120));

  auto handle = [this](const httplib::Request& req, httplib::Response& res) {
    const std::string& target = req.target;
    const size_t q = target.find('?');
    const std::string path = target.substr(0, q);
    const std::string query = q == std::string::npos ? std::string() : target.substr(q + 1);
    if (path == "/healthz") {
      res.set_content("ok\n", "text/plain");
      return;
    }
    if (console::IsUiPath(path) && (req.method == "GET" || req.method == "HEAD")) {
      // The console's static files: no token (they hold no data; its /v1 calls carry one).
      Write(console::ServeUi(path), res);
      return;
    }
    if (path == kOpenApiPath) {
      // The API's own description (api/openapi.json, compiled in): no token, as it holds no data.
      if (req.method != "GET" && req.method != "HEAD") {
        res.set_header("Allow", "GET, HEAD");
        JsonError(res, 405, "method " + req.method + " not allowed on " + path + " (allowed: GET)");
        return;
      }
      res.set_content(std::string(api::OpenApiJson()), "application/json");
      return;
    }
    if (path != "/v1" && !path.starts_with("/v1/")) {
      JsonError(res, 404, "no route " + path + " on the control listener (it serves /v1)");
      return;
    }
    std::string bearer(auth::BearerToken(req.get_header_value("Authorization")));
    if (bearer.empty() && path == kEventsPath && req.method == "GET") {
      // EventSource cannot send a header: the page trades its token for a one-connection
      // ticket (POST /v1/events/ticket) and passes that, so no long-lived token is in a URL.
      if (const std::string ticket = std::string(RawQueryValue(query, "ticket").value_or(""));
          !ticket.empty()) {
        bearer = RedeemTicket(ticket);
        if (bearer.empty()) {
          JsonError(res, 401,
                    "ticket: unknown, used or expired (POST " + std::string(kTicketPath) +
                        " gives one, valid " + std::to_string(kTicketLifetime.count()) +
                        " s for one stream)");
          return;
        }
      }
    }
    if (bearer.empty()) {
      res.set_header("WWW-Authenticate", "Bearer realm=\"shoal\"");
      JsonError(res, 401,
                "authentication required: send 'Authorization: Bearer <token>' (shoal reads "
                "SHOAL_TOKEN or its config file)");
      return;
    }
    auto who = tokens_.Authenticate(bearer);
    if (!who.ok()) {
      res.set_header("WWW-Authenticate", "Bearer realm=\"shoal\", error=\"invalid_token\"");
      JsonError(res, 401, who.status().message());
      return;
    }
    if (path == kEventsPath && req.method == "GET") {
      if (Status st = auth::Authorize(*who, auth::Action::kReadNode, {}); !st.ok()) {
        JsonError(res, HttpStatusFor(st.code()), st.message());
        return;
      }
      ServeEvents(query, std::move(bearer), res);
      return;
    }
    if (path == kEventsPath) {
      res.set_header("Allow", "GET");
      JsonError(res, 405, "method " + req.method + " not allowed on " + path + " (allowed: GET)");
      return;
    }
    HttpReply r;
    if (path.starts_with("/v1/models/")) {
      r = ModelStats(req.method, path, *who);
    } else if (path == kTicketPath) {
      r = IssueTicket(req.method, bearer, *who);
    } else {
      r = api_.Handle(req.method, path, query, req.body, *who);
    }
    if (r.status >= 400 && r.status != 404) {
      spdlog::info("control: {} {} by {}: {}", req.method, path, who->Describe(), r.status);
    } else if (req.method != "GET") {
      spdlog::info("control: {} {} by {}: {}", req.method, path, who->Describe(), r.status);
    }
    Write(std::move(r), res);
  };
  // Every path, including one whose %-decoding holds a line break ('.' would not match it, and
  // httplib would answer 404 with no body).
  const std::string any = "[\\s\\S]*";
  server_->Get(any, handle);
  server_->Post(any, handle);
  server_->Put(any, handle);
  server_->Patch(any, handle);
  server_->Delete(any, handle);
  server_->Options(any, handle);
  // httplib's own errors (a request line it cannot parse, such as an unknown method like QUERY)
  // come with an empty body: give them the API's JSON error, and close the connection, since
  // such a request's body was left unread and would be misread as the next request.
  server_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours
        res.set_header("Connection", "close");
        JsonError(res, res.status,
                  res.status == 400 ? "malformed request (method '" + req.method +
                                          "'): the control API takes GET, HEAD, POST, PUT, PATCH, "
                                          "DELETE and OPTIONS"
                                    : "no route " + req.path);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_pre_routing_handler([handle](const httplib::Request& req, httplib::Response& res) {
    // httplib reads a body only for POST, PUT, PATCH and DELETE: a GET, HEAD or OPTIONS that
    // carries one would leave it on the connection to be read as the next request (which then
    // gets an empty 400). Such a reply closes the connection instead.
    const bool reads_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                            req.method == "DELETE";
    const bool has_body =
        req.has_header("Transfer-Encoding") ||
        (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
    if (!reads_body && has_body) res.set_header("Connection", "close");
    // A method httplib has no handlers for (TRACE, CONNECT, QUERY, ...) goes to the route,
    // which answers 405 with the methods it has, instead of httplib's empty 400.
    if (reads_body || req.method == "GET" || req.method == "HEAD" || req.method == "OPTIONS") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    handle(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });

  const int port = config_.control_port == 0
                       ? server_->bind_to_any_port(config_.control_listen_host)
                       : (server_->bind_to_port(config_.control_listen_host, config_.control_port)
                              ? config_.control_port
                              : -1);
  if (port <= 0) {
    return Unavailable("control API: cannot listen on " + config_.control_listen_host + ":" +
                       std::to_string(config_.control_port) + " (in use, or not an address here)");
  }
  port_ = static_cast<uint16_t>(port);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  spdlog::info("control API on {} ({}; bearer tokens required)", url(),
               tls_ ? "TLS"
               : IsLoopbackHost(config_.control_listen_host)
                   ? "loopback only"
                   : "WARNING: plain HTTP beyond this host");
  return Status::Ok();
}

void ControlServer::Write(HttpReply r, httplib::Response& res) {
  res.status = r.status;
  for (auto& [k, v] : r.headers) res.set_header(k, v);
  if (r.shared_body) {
    // Streamed from the bytes it holds (a model: tens of MB), not copied into the response.
    const size_t size = r.shared_body->size();
    res.set_content_provider(
        size, r.content_type,
        [body = std::move(r.shared_body)](size_t offset, size_t length, httplib::DataSink& sink) {
          return sink.write(body->data() + offset, std::min(length, body->size() - offset));
        });
  } else {
    res.set_content(std::move(r.body), r.content_type);
  }
}

HttpReply ControlServer::ModelStats(const std::string& method, const std::string& path,
                                    const auth::Principal& who) {
  auto error = [](int status, const std::string& message) {
    HttpReply r;
    r.status = status;
    r.body = nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                     nlohmann::json::error_handler_t::replace) +
             "\n";
    return r;
  };
  std::string_view rest = std::string_view(path).substr(std::string_view("/v1/models/").size());
  const size_t slash = rest.find('/');
  const std::string_view model = rest.substr(0, slash);
  if (slash == std::string_view::npos || rest.substr(slash) != "/stats" || !ValidModelName(model)) {
    return error(404, "no route " + path + " (GET /v1/models/{model}/stats)");
  }
  if (method != "GET") {
    HttpReply r = error(405, "method " + method + " not allowed on " + path + " (allowed: GET)");
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  if (Status st = auth::Authorize(who, auth::Action::kReadNode, {}); !st.ok()) {
    return error(HttpStatusFor(st.code()), st.message());
  }
  if (gateway_url_.empty()) return error(501, "this listener has no gateway to ask");
  // The gateway answers /v2 on a port of its own; the console, which may call only this
  // origin, reads an inference model's stats through here.
  client::HttpClient client(gateway_url_);
  client::HttpRequest req;
  req.path = "/v2/models/" + std::string(model) + "/stats";
  req.timeout_ms = 12000;
  std::string why;
  auto res = client.Send(req, &why);
  if (!res) return error(502, "the gateway at " + gateway_url_ + " did not answer: " + why);
  HttpReply r;
  r.status = static_cast<int>(res->status);
  auto type = res->headers.find("content-type");
  if (type != res->headers.end()) r.content_type = type->second;
  if (r.content_type.empty()) r.content_type = "application/json";
  r.body = std::move(res->body);
  return r;
}

HttpReply ControlServer::IssueTicket(const std::string& method, const std::string& bearer,
                                     const auth::Principal& who) {
  auto reply = [](int status, const nlohmann::json& j) {
    HttpReply r;
    r.status = status;
    r.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    return r;
  };
  if (method != "POST") {
    HttpReply r = reply(405, {{"error", "method " + method + " not allowed on " + kTicketPath +
                                            " (allowed: POST)"}});
    r.headers.emplace_back("Allow", "POST");
    return r;
  }
  // Only for whoever may open the stream itself.
  if (Status st = auth::Authorize(who, auth::Action::kReadNode, {}); !st.ok()) {
    return reply(HttpStatusFor(st.code()), {{"error", st.message()}});
  }
  unsigned char raw[24];
  if (getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) {
    return reply(500, {{"error", "no randomness for a ticket"}});
  }
  std::string ticket;
  for (unsigned char c : raw) {
    static constexpr char kHex[] = "0123456789abcdef";
    ticket += kHex[c >> 4];
    ticket += kHex[c & 15];
  }
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(tickets_mu_);
    std::erase_if(tickets_, [&](const auto& kv) { return kv.second.expires <= now; });
    if (tickets_.size() >= kMaxTickets) {
      HttpReply r = reply(503, {{"error", "too many event tickets waiting for their stream"}});
      r.headers.emplace_back("Retry-After", "5");
      return r;
    }
    tickets_[ticket] = Ticket{bearer, now + kTicketLifetime};
  }
  return reply(201, {{"ticket", ticket}, {"expires_in_s", kTicketLifetime.count()}});
}

std::string ControlServer::RedeemTicket(const std::string& ticket) {
  std::lock_guard lock(tickets_mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return {};
  std::string bearer = std::move(it->second.bearer);
  const bool fresh = it->second.expires > std::chrono::steady_clock::now();
  tickets_.erase(it);
  return fresh ? bearer : std::string();
}

void ControlServer::ServeEvents(const std::string& query, std::string bearer,
                                httplib::Response& res) {
  double interval = kDefaultEventInterval;
  if (const std::string v = std::string(RawQueryValue(query, "interval").value_or(""));
      !v.empty()) {
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), interval);
    if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(interval) ||
        interval < kMinEventInterval || interval > kMaxEventInterval) {
      JsonError(res, 400,
                fmt::format("interval: seconds between snapshots, from {} to {}, not '{}'",
                            kMinEventInterval, kMaxEventInterval, v));
      return;
    }
  }
  if (streams_.fetch_add(1) >= kMaxEventStreams) {
    streams_.fetch_sub(1);
    res.set_header("Retry-After", "5");
    JsonError(res, 503,
              "too many event streams (" + std::to_string(kMaxEventStreams) +
                  " at once): poll the /v1 routes instead, or retry later");
    return;
  }
  auto slot = std::make_shared<StreamSlot>(streams_);
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Accel-Buffering", "no");
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(interval));
  struct State {
    uint64_t seq = 0;
    bool started = false;
    std::chrono::steady_clock::time_point next_tick;
  };
  auto state = std::make_shared<State>();
  state->seq = commits_->Latest();
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, slot, state, period, bearer = std::move(bearer)](size_t, httplib::DataSink& sink) {
        using Clock = std::chrono::steady_clock;
        std::string out;
        if (!state->started) {
          state->started = true;
          state->next_tick = Clock::now();
          out = "retry: 2000\n\n";  // EventSource's reconnect delay
        } else {
          // Until the next tick, sending each commit as it lands; the stop flag is looked at
          // every kStopCheck.
          while (out.empty() && !stopping_.load()) {
            const auto now = Clock::now();
            if (now >= state->next_tick) break;
            const auto until = std::min(state->next_tick, now + kStopCheck);
            for (const CommitNotice& c : commits_->WaitAfter(&state->seq, until)) {
              out +=
                  SseEvent("commit", nlohmann::json{{"job", c.job}, {"version", c.version}}.dump(
                                         -1, ' ', false, nlohmann::json::error_handler_t::replace));
            }
          }
          if (stopping_.load()) return false;
          if (!out.empty()) return sink.write(out.data(), out.size());
        }
        // The tick: a revoked token's stream ends here.
        auto who = tokens_.Authenticate(bearer);
        if (!who.ok()) {
          out += SseEvent("end", R"({"reason":"token no longer valid"})");
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        }
        HttpReply snap = api_.Snapshot(*who);
        if (snap.status != 200) {
          out += SseEvent("end", snap.body);
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        }
        out += SseEvent("snapshot", snap.body);
        state->next_tick += period;
        if (state->next_tick < Clock::now()) state->next_tick = Clock::now() + period;
        return sink.write(out.data(), out.size());
      });
}

void ControlServer::Stop() {
  stopping_.store(true);
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shoal
