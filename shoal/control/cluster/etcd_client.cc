#include "shoal/control/cluster/etcd_client.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace shoal::cluster {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> Unbase64(const std::string& text) {
  if (text.empty()) return std::string();
  if (text.size() % 4 != 0)
    return Internal("etcd: a base64 field of " + std::to_string(text.size()) + " characters");
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return Internal("etcd: a field that is not base64");
  size_t pad = 0;
  if (text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// The gateway writes int64 fields as JSON strings and leaves out fields that are zero.
int64_t Int(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  if (it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

Result<KeyValue> ParseKv(const json& j) {
  KeyValue kv;
  auto key = Unbase64(j.value("key", ""));
  if (!key.ok()) return key.status();
  auto value = Unbase64(j.value("value", ""));
  if (!value.ok()) return value.status();
  kv.key = std::move(*key);
  kv.value = std::move(*value);
  kv.create_revision = Int(j, "create_revision");
  kv.mod_revision = Int(j, "mod_revision");
  kv.version = Int(j, "version");
  kv.lease = Int(j, "lease");
  return kv;
}

Result<RangeResult> ParseRange(const json& j) {
  RangeResult r;
  if (auto h = j.find("header"); h != j.end()) r.revision = Int(*h, "revision");
  if (auto kvs = j.find("kvs"); kvs != j.end()) {
    for (const auto& e : *kvs) {
      auto kv = ParseKv(e);
      if (!kv.ok()) return kv.status();
      r.kvs.push_back(std::move(*kv));
    }
  }
  return r;
}

Result<json> ParseJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Internal("etcd: a reply that is not JSON: " + text.substr(0, 200));
  return j;
}

// A call's reply as JSON: the call's error, or the parse's.
Result<json> ReplyJson(const Result<std::string>& reply) {
  if (!reply.ok()) return reply.status();
  return ParseJson(*reply);
}

// The range body of every key under `prefix`.
json PrefixRange(const std::string& prefix) {
  return {{"key", Base64(prefix)}, {"range_end", Base64(PrefixRangeEnd(prefix))}};
}

// gRPC status codes (carried in the gateway's error body) to ours.
Status FromGrpc(int code, const std::string& message) {
  std::string m = "etcd: " + message;
  switch (code) {
    case 3:
      return InvalidArgument(m);
    case 5:
      return NotFound(m);
    case 6:
      return AlreadyExists(m);
    case 7:
      return PermissionDenied(m);
    case 16:
      return Unauthenticated(m);
    case 4:
      return {StatusCode::kDeadlineExceeded, m};
    case 8:
      return ResourceExhausted(m);
    case 14:
      return Unavailable(m);
    default:
      return Internal(m + " (gRPC code " + std::to_string(code) + ")");
  }
}

void AppendError(std::string* errors, const std::string& endpoint, const std::string& what) {
  if (!errors->empty()) errors->append("; ");
  errors->append(endpoint).append(": ").append(what);
}

// A JSON POST to etcd's gateway.
client::HttpRequest Post(const std::string& path, const std::string& body,
                         const EtcdOptions& options) {
  client::HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.body = body;
  r.headers = {"Content-Type: application/json"};
  r.connect_timeout_ms = static_cast<long>(options.connect_timeout.count());
  return r;
}

}  // namespace

Result<std::vector<std::string>> ParseEndpoints(const std::string& flag) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= flag.size()) {
    size_t comma = flag.find(',', start);
    std::string e =
        flag.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? flag.size() + 1 : comma + 1;
    if (e.empty()) continue;
    while (!e.empty() && e.back() == '/') e.pop_back();
    const std::string scheme = "http://";
    if (e.rfind(scheme, 0) != 0) {
      return InvalidArgument("etcd endpoint '" + e +
                             "' is not http://host:port (https is not supported yet)");
    }
    std::string hostport = e.substr(scheme.size());
    size_t colon = hostport.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == hostport.size() ||
        hostport.find('/') != std::string::npos ||
        !std::all_of(hostport.begin() + static_cast<long>(colon) + 1, hostport.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      return InvalidArgument("etcd endpoint '" + e + "' is not http://host:port");
    }
    out.push_back(e);
  }
  if (out.empty())
    return InvalidArgument("etcd endpoints: none given (want http://host:port[,...])");
  return out;
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return InvalidArgument("etcd: no endpoints");
  for (const auto& e : options.endpoints) {
    auto ok = ParseEndpoints(e);
    if (!ok.ok()) return ok.status();
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  for (const std::string& e : options_.endpoints) {
    clients_.push_back(std::make_unique<client::HttpClient>(e));
  }
}

EtcdClient::~EtcdClient() = default;

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  std::lock_guard lock(mu_);
  calls_.fetch_add(1);
  std::string errors;
  const size_t n = options_.endpoints.size();
  client::HttpRequest request = Post(path, body, options_);
  request.timeout_ms = static_cast<long>(options_.request_timeout.count());
  for (size_t i = 0; i < n; ++i) {
    const size_t which = (preferred_ + i) % n;
    const auto t0 = Clock::now();
    std::string error;
    auto response = clients_[which]->Send(request, &error);
    if (!response) {
      AppendError(&errors, options_.endpoints[which], error);
      continue;
    }
    const long http = response->status;
    std::string& reply = response->body;
    last_latency_us_.store(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
    if (http == 200) {
      preferred_ = which;
      return reply;
    }
    // The gateway's error body: {"error": "...", "code": N, "message": "..."}.
    auto j = ParseJson(reply);
    int code = 0;
    std::string message = "HTTP " + std::to_string(http);
    if (j.ok() && j->is_object()) {
      code = static_cast<int>(Int(*j, "code"));
      message = j->value("message", j->value("error", message));
    }
    if (code == 14 || http >= 500) {  // that member cannot serve now: try the next one
      if (code != 14 && code != 0) {
        preferred_ = which;
        return FromGrpc(code, message);
      }
      AppendError(&errors, options_.endpoints[which], message);
      continue;
    }
    preferred_ = which;
    return FromGrpc(code, message);
  }
  failures_.fetch_add(1);
  return Unavailable("etcd unreachable (" + errors + ")");
}

Result<RangeResult> EtcdClient::Get(const std::string& key) {
  auto j = ReplyJson(Call("/v3/kv/range", json{{"key", Base64(key)}}.dump()));
  if (!j.ok()) return j.status();
  return ParseRange(*j);
}

Result<RangeResult> EtcdClient::GetPrefix(const std::string& prefix) {
  auto j = ReplyJson(Call("/v3/kv/range", PrefixRange(prefix).dump()));
  if (!j.ok()) return j.status();
  return ParseRange(*j);
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  auto j = ReplyJson(Call("/v3/kv/put", body.dump()));
  if (!j.ok()) return j.status();
  return Int(j->value("header", json::object()), "revision");
}

Result<int64_t> EtcdClient::Delete(const std::string& key) {
  auto j = ReplyJson(Call("/v3/kv/deleterange", json{{"key", Base64(key)}}.dump()));
  if (!j.ok()) return j.status();
  return Int(*j, "deleted");
}

Status EtcdClient::DeleteExisting(const std::string& key, const std::string& missing) {
  auto deleted = Delete(key);
  if (!deleted.ok()) return deleted.status();
  if (*deleted == 0) return NotFound(missing);
  return Status::Ok();
}

Result<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) {
  auto j = ReplyJson(Call("/v3/kv/deleterange", PrefixRange(prefix).dump()));
  if (!j.ok()) return j.status();
  return Int(*j, "deleted");
}

Result<bool> EtcdClient::Txn(const std::string& body, const std::string& /*key*/,
                             RangeResult* current) {
  auto j = ReplyJson(Call("/v3/kv/txn", body));
  if (!j.ok()) return j.status();
  const bool succeeded = j->value("succeeded", false);
  if (!succeeded && current != nullptr) {
    *current = RangeResult{};
    if (auto h = j->find("header"); h != j->end()) current->revision = Int(*h, "revision");
    for (const auto& r : j->value("responses", json::array())) {
      if (auto range = r.find("response_range"); range != r.end()) {
        auto parsed = ParseRange(*range);
        if (!parsed.ok()) return parsed.status();
        current->kvs = std::move(parsed->kvs);
      }
    }
  }
  return succeeded;
}

Result<bool> EtcdClient::PutIfAbsent(const std::string& key, const std::string& value,
                                     int64_t lease, RangeResult* current) {
  return PutIfModRevision(key, value, 0, lease, current);
}

Result<bool> EtcdClient::PutIfModRevision(const std::string& key, const std::string& value,
                                          int64_t mod_revision, int64_t lease,
                                          RangeResult* current) {
  const std::string k = Base64(key);
  json put{{"key", k}, {"value", Base64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  json compare =
      mod_revision == 0
          ? json{{"key", k}, {"target", "CREATE"}, {"create_revision", "0"}}
          : json{{"key", k}, {"target", "MOD"}, {"mod_revision", std::to_string(mod_revision)}};
  json body{{"compare", json::array({compare})},
            {"success", json::array({json{{"request_put", put}}})},
            {"failure", json::array({json{{"request_range", json{{"key", k}}}}})}};
  return Txn(body.dump(), key, current);
}

Result<bool> EtcdClient::DeleteIfValue(const std::string& key, const std::string& value) {
  const std::string k = Base64(key);
  json body{
      {"compare", json::array({json{{"key", k}, {"target", "VALUE"}, {"value", Base64(value)}}})},
      {"success", json::array({json{{"request_delete_range", json{{"key", k}}}}})}};
  return Txn(body.dump(), key, nullptr);
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  if (ttl_seconds < 1) return InvalidArgument("etcd lease TTL must be at least 1 s");
  auto reply = Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds)}}.dump());
  if (!reply.ok()) return reply.status();
  auto j = ParseJson(*reply);
  if (!j.ok()) return j.status();
  if (!j->value("error", "").empty())
    return Unavailable("etcd lease grant: " + j->value("error", ""));
  const int64_t id = Int(*j, "ID");
  if (id == 0) return Internal("etcd lease grant: no lease id in " + reply->substr(0, 200));
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  auto reply = Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!reply.ok()) return reply.status();
  // A streamed call: one {"result": ...} (or {"error": ...}) object per line.
  auto j = ParseJson(reply->substr(0, reply->find('\n')));
  if (!j.ok()) return j.status();
  if (auto e = j->find("error"); e != j->end()) {
    return FromGrpc(
        static_cast<int>(Int(*e, "grpc_code") != 0 ? Int(*e, "grpc_code") : Int(*e, "code")),
        e->value("message", "lease keepalive failed"));
  }
  const json result = j->value("result", json::object());
  const int64_t ttl = Int(result, "TTL");
  if (ttl <= 0) return NotFound("etcd lease " + std::to_string(lease) + " has expired");
  return ttl;
}

Status EtcdClient::RevokeLease(int64_t lease) {
  auto reply = Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return reply.status();
}

Result<int64_t> EtcdClient::Ping() {
  auto j = ReplyJson(Call("/v3/maintenance/status", "{}"));
  if (!j.ok()) return j.status();
  return Int(j->value("header", json::object()), "revision");
}

std::unique_ptr<EtcdWatch> EtcdClient::WatchPrefix(const std::string& prefix,
                                                   int64_t start_revision, EventsFn on_events,
                                                   CompactedFn on_compacted) {
  return std::unique_ptr<EtcdWatch>(
      new EtcdWatch(this, prefix, start_revision, std::move(on_events), std::move(on_compacted)));
}

// ---- watches ----

EtcdWatch::EtcdWatch(EtcdClient* client, std::string prefix, int64_t start_revision,
                     EtcdClient::EventsFn on_events, EtcdClient::CompactedFn on_compacted)
    : client_(client),
      prefix_(std::move(prefix)),
      on_events_(std::move(on_events)),
      on_compacted_(std::move(on_compacted)),
      next_revision_(start_revision) {
  thread_ = std::thread([this] { Run(); });
}

EtcdWatch::~EtcdWatch() {
  stop_.store(true);
  end_stream_.store(true);
  if (thread_.joinable()) thread_.join();
}

void EtcdWatch::Run() {
  auto backoff = std::chrono::milliseconds(100);
  size_t which = 0;
  while (!stop_.load()) {
    const auto& endpoints = client_->options().endpoints;
    const auto opened = Clock::now();
    StreamOnce(endpoints[which % endpoints.size()]);
    connected_.store(false);
    if (stop_.load()) break;
    ++which;  // the next attempt goes to the next member
    if (Clock::now() - opened > std::chrono::seconds(5)) backoff = std::chrono::milliseconds(100);
    const auto until = Clock::now() + backoff;
    while (!stop_.load() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

void EtcdWatch::StreamOnce(const std::string& endpoint) {
  end_stream_.store(false);
  if (stop_.load()) return;
  json create = PrefixRange(prefix_);
  if (next_revision_.load() > 0) create["start_revision"] = std::to_string(next_revision_.load());
  const std::string body = json{{"create_request", create}}.dump();
  partial_.clear();
  const auto on_line = [&](const std::string& line) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      spdlog::warn("etcd watch {}: a line that is not JSON: {}", prefix_, line.substr(0, 200));
      return;
    }
    if (j.contains("error")) {
      spdlog::warn("etcd watch {}: {}", prefix_, j["error"].dump());
      return;
    }
    const json r = j.value("result", json::object());
    if (r.value("created", false)) connected_.store(true);
    if (const int64_t compact = Int(r, "compact_revision"); compact > 0) {
      end_stream_.store(true);
      spdlog::warn("etcd watch {}: history before revision {} is compacted; re-reading", prefix_,
                   compact);
      if (on_compacted_) on_compacted_(compact);
      next_revision_.store(0);  // from now on
      return;
    }
    auto events = r.find("events");
    if (events == r.end() || events->empty()) return;
    std::vector<WatchEvent> out;
    int64_t last = 0;
    for (const auto& e : *events) {
      WatchEvent ev;
      ev.type =
          e.value("type", "PUT") == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
      auto kv = ParseKv(e.value("kv", json::object()));
      if (!kv.ok()) {
        spdlog::warn("etcd watch {}: {}", prefix_, kv.status().message());
        continue;
      }
      ev.kv = std::move(*kv);
      last = std::max(last, ev.kv.mod_revision);
      out.push_back(std::move(ev));
    }
    const int64_t revision = std::max(last, Int(r.value("header", json::object()), "revision"));
    if (!out.empty()) on_events_(out, revision);
    if (last > 0) next_revision_.store(last + 1);
  };
  client::HttpRequest request = Post("/v3/watch", body, client_->options());
  // A partitioned member never closes the stream: TCP keepalive notices within ~10 s.
  request.keepalive_probes = true;
  request.cancel = &end_stream_;
  request.sink = [&](long /*status*/, std::string_view bytes) {
    partial_.append(bytes);
    size_t nl;
    while (!end_stream_.load() && (nl = partial_.find('\n')) != std::string::npos) {
      const std::string line = partial_.substr(0, nl);
      partial_.erase(0, nl + 1);
      if (!line.empty()) on_line(line);
    }
  };
  client::HttpClient http(endpoint);
  std::string error;
  if (!http.Send(request, &error) && !end_stream_.load()) {
    spdlog::debug("etcd watch {} on {}: {}", prefix_, endpoint, error);
  }
}

}  // namespace shoal::cluster
