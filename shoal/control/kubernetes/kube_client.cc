#include "shoal/control/kubernetes/kube_client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "shoal/common/http/http_client.h"

namespace shoal::kubernetes {

using json = nlohmann::json;

namespace {

constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// The API server's message of an error answer (a Status object), else the body's start.
std::string ApiError(long status, const std::string& body) {
  std::string message = body.substr(0, 300);
  if (json j = json::parse(body, nullptr, false); j.is_object() && j.contains("message")) {
    message = j.value("message", message);
  }
  return "Kubernetes API: HTTP " + std::to_string(status) + ": " + message;
}

Status FromHttp(long status, const std::string& body) {
  const std::string m = ApiError(status, body);
  switch (status) {
    case 401:
      return Unauthenticated(m);
    case 403:
      return PermissionDenied(m);
    case 404:
      return NotFound(m);
    case 409:
      return AlreadyExists(m);
    default:
      return status >= 500 ? Unavailable(m) : InvalidArgument(m);
  }
}

}  // namespace

Result<KubeConfig> KubeConfig::Resolve(std::string server, std::string token_file,
                                       std::string ca_file) {
  KubeConfig c;
  if (server.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || port == nullptr) {
      return InvalidArgument(
          "--kubernetes: no --kube-api given and not in a pod (KUBERNETES_SERVICE_HOST unset)");
    }
    const std::string h = host;
    server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  }
  const std::string sa = kServiceAccountDir;
  c.server = server;
  c.token_file = token_file.empty() ? sa + "/token" : token_file;
  c.ca_file = ca_file.empty() && token_file.empty() ? sa + "/ca.crt" : ca_file;
  if (!std::ifstream(c.token_file)) {
    return InvalidArgument("--kubernetes: cannot read the token file " + c.token_file);
  }
  return c;
}

std::string ResourceKind::Path(const std::string& ns, const std::string& name) const {
  std::string p = "/apis/" + group + "/" + version + "/";
  if (!ns.empty()) p += "namespaces/" + ns + "/";
  p += plural;
  if (!name.empty()) p += "/" + name;
  return p;
}

Result<std::string> KubeClient::Token() const {
  std::ifstream in(config_.token_file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return Unauthenticated("Kubernetes API: no token in " + config_.token_file);
  return t;
}

Result<ResourceList> KubeClient::List(const ResourceKind& kind) const {
  auto token = Token();
  if (!token.ok()) return token.status();
  client::HttpClient http(config_.server, *token, config_.ca_file);
  client::HttpRequest req;
  req.path = kind.Path();
  req.headers = {"Accept: application/json"};
  req.timeout_ms = 30000;
  std::string error;
  auto res = http.Send(req, &error);
  if (!res) return Unavailable("Kubernetes API: " + error);
  if (res->status != 200) return FromHttp(res->status, res->body);
  json j = json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("items") || !j["items"].is_array()) {
    return Internal("Kubernetes API: a list of " + kind.plural + " that is not a list");
  }
  ResourceList out;
  out.items = std::move(j["items"]);
  out.resource_version = j.value("metadata", json::object()).value("resourceVersion", "");
  return out;
}

Result<WatchEnd> KubeClient::Watch(
    const ResourceKind& kind, const std::string& from, int timeout_s,
    const std::function<void(const std::string&, const json&)>& on_event,
    const std::atomic<bool>* cancel) const {
  auto token = Token();
  if (!token.ok()) return token.status();
  client::HttpClient http(config_.server, *token, config_.ca_file);
  client::HttpRequest req;
  req.path = kind.Path() +
             "?watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout_s) +
             "&resourceVersion=" + http.Escape(from);
  req.headers = {"Accept: application/json"};
  req.timeout_ms = (timeout_s + 15) * 1000L;
  req.cancel = cancel;
  WatchEnd end;
  end.resource_version = from;
  std::string pending, error_body;
  req.sink = [&](long status, std::string_view bytes) {
    if (status != 200) {
      error_body.append(bytes);
      return;
    }
    pending.append(bytes);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      json e = json::parse(pending.substr(0, nl), nullptr, false);
      pending.erase(0, nl + 1);
      if (!e.is_object() || !e.contains("object")) continue;
      const std::string type = e.value("type", "");
      const json& obj = e["object"];
      if (type == "ERROR") {
        if (obj.value("code", 0) == 410) end.gone = true;
        continue;
      }
      const std::string rv = obj.value("metadata", json::object()).value("resourceVersion", "");
      if (!rv.empty()) end.resource_version = rv;
      if (type == "ADDED" || type == "MODIFIED" || type == "DELETED") on_event(type, obj);
    }
  };
  std::string error;
  auto res = http.Send(req, &error);
  if (!res) {
    if (cancel != nullptr && cancel->load()) return end;
    return Unavailable("Kubernetes API: watch of " + kind.plural + ": " + error);
  }
  if (res->status == 410) {
    end.gone = true;
    return end;
  }
  if (res->status != 200) return FromHttp(res->status, error_body);
  return end;
}

Status KubeClient::PatchStatus(const ResourceKind& kind, const std::string& ns,
                               const std::string& name, const json& status) const {
  auto token = Token();
  if (!token.ok()) return token.status();
  client::HttpClient http(config_.server, *token, config_.ca_file);
  const std::string body = json{{"status", status}}.dump();
  client::HttpRequest req;
  req.method = "PATCH";
  req.path = kind.Path(ns, name) + "/status";
  req.body = body;
  req.headers = {"Content-Type: application/merge-patch+json", "Accept: application/json"};
  req.timeout_ms = 30000;
  std::string error;
  auto res = http.Send(req, &error);
  if (!res) return Unavailable("Kubernetes API: " + error);
  if (res->status != 200) return FromHttp(res->status, res->body);
  return Status::Ok();
}

}  // namespace shoal::kubernetes
