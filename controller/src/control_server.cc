#include "shoal/controller/control_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>

#include "shoal/console/console_assets.h"

namespace shoal {
namespace {

constexpr size_t kControlThreads = 4;

void JsonError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                           nlohmann::json::error_handler_t::replace) +
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
  const std::string host = any ? "127.0.0.1" : (h.find(':') != std::string::npos ? "[" + h + "]" : h);
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
  server_->new_task_queue = [] { return new httplib::ThreadPool(kControlThreads); };
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
    if (path != "/v1" && !path.starts_with("/v1/")) {
      JsonError(res, 404, "no route " + path + " on the control listener (it serves /v1)");
      return;
    }
    const std::string bearer(auth::BearerToken(req.get_header_value("Authorization")));
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
    HttpReply r = path.starts_with("/v1/models/")
                      ? ModelStats(req.method, path, *who)
                      : api_.Handle(req.method, path, query, req.body, *who);
    if (r.status >= 400 && r.status != 404) {
      spdlog::info("control: {} {} by {}: {}", req.method, path, who->Describe(), r.status);
    } else if (req.method != "GET") {
      spdlog::info("control: {} {} by {}: {}", req.method, path, who->Describe(), r.status);
    }
    Write(std::move(r), res);
  };
  const std::string any = ".*";
  server_->Get(any, handle);
  server_->Post(any, handle);
  server_->Put(any, handle);
  server_->Patch(any, handle);
  server_->Delete(any, handle);
  server_->Options(any, handle);

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
               tls_ ? "TLS" : IsLoopbackHost(config_.control_listen_host)
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
  httplib::Client client(gateway_url_);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(10));
  auto res = client.Get("/v2/models/" + std::string(model) + "/stats");
  if (!res) {
    return error(502, "the gateway at " + gateway_url_ +
                          " did not answer: " + httplib::to_string(res.error()));
  }
  HttpReply r;
  r.status = res->status;
  r.content_type = res->get_header_value("Content-Type");
  if (r.content_type.empty()) r.content_type = "application/json";
  r.body = std::move(res->body);
  return r;
}

void ControlServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shoal
