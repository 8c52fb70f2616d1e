// A client for etcd's v3 API (KV, transactions, leases, watches), spoken through the JSON
// gateway that every etcd v3 server serves on its client port (`/v3/kv/range`, `/v3/lease/*`,
// the streamed `/v3/watch`): the cluster's shared state (nodes, functions, placements, the
// controller election) lives in etcd, and this is the only code that talks to it.
//
// Calls are blocking and thread-safe; they try the configured endpoints in turn (starting with
// the last one that answered) and fail with kUnavailable naming every endpoint tried when none
// answers. Keys and values are bytes (the gateway carries them base64).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/http/http_client.h"
#include "shoal/common/status.h"

namespace shoal::cluster {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t revision = 0;  // the store's revision the range was read at
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for a delete: key and mod_revision only
};

struct EtcdOptions {
  // "http://host:port" each; at least one.
  std::vector<std::string> endpoints;
  std::chrono::milliseconds request_timeout{3000};
  std::chrono::milliseconds connect_timeout{1000};
};

// Parses "http://a:2379,http://b:2379" (the --etcd flag) into endpoints, refusing anything
// that is not http://host:port with a message naming the bad entry.
Result<std::vector<std::string>> ParseEndpoints(const std::string& flag);

// The key range of every key under `prefix` (etcd's range_end: the prefix with its last byte
// incremented).
std::string PrefixRangeEnd(const std::string& prefix);

class EtcdWatch;

class EtcdClient {
 public:
  static Result<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  Result<RangeResult> Get(const std::string& key);
  Result<RangeResult> GetPrefix(const std::string& prefix);
  // Returns the revision the put made.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Returns how many keys were deleted.
  Result<int64_t> Delete(const std::string& key);
  // Delete of a named record: NotFound(`missing`) when there was no such key.
  Status DeleteExisting(const std::string& key, const std::string& missing);
  Result<int64_t> DeletePrefix(const std::string& prefix);

  // Transactions. Each returns whether its comparison held (and so the write happened); when
  // it did not, `current` (if given) receives the key as it is now (absent: no value).
  // Creates `key` only if it does not exist.
  Result<bool> PutIfAbsent(const std::string& key, const std::string& value, int64_t lease,
                           RangeResult* current = nullptr);
  // Writes `key` only if its mod_revision is `mod_revision` (0: only if absent).
  Result<bool> PutIfModRevision(const std::string& key, const std::string& value,
                                int64_t mod_revision, int64_t lease = 0,
                                RangeResult* current = nullptr);
  // Deletes `key` only if its value is `value` (a leader stepping down deletes only its own key).
  Result<bool> DeleteIfValue(const std::string& key, const std::string& value);

  // Leases. GrantLease returns the lease id; KeepAlive returns the TTL left after renewing
  // (kNotFound once the lease has expired or was revoked).
  Result<int64_t> GrantLease(int64_t ttl_seconds);
  Result<int64_t> KeepAlive(int64_t lease);
  Status RevokeLease(int64_t lease);

  // The endpoint's status round trip (/v3/maintenance/status): its revision, for health checks
  // and the etcd latency metric.
  Result<int64_t> Ping();

  // Calls `on_events` (on the watch's own thread) with every change to a key under `prefix`
  // from `start_revision` on (0: from now), in revision order. A broken stream is re-opened
  // from the revision after the last one delivered, with back-off, so nothing between is
  // missed; if etcd has compacted that history, `on_compacted` is called (the owner re-reads
  // the prefix with GetPrefix and carries on) and the watch resumes from now.
  using EventsFn = std::function<void(const std::vector<WatchEvent>& events, int64_t revision)>;
  using CompactedFn = std::function<void(int64_t compact_revision)>;
  std::unique_ptr<EtcdWatch> WatchPrefix(const std::string& prefix, int64_t start_revision,
                                         EventsFn on_events, CompactedFn on_compacted = {});

  const EtcdOptions& options() const { return options_; }
  // Round trips made and failed (every endpoint tried) since start, and the last call's latency
  // in microseconds: for /metrics.
  uint64_t calls() const { return calls_.load(); }
  uint64_t failures() const { return failures_.load(); }
  int64_t last_latency_us() const { return last_latency_us_.load(); }

 private:
  friend class EtcdWatch;
  explicit EtcdClient(EtcdOptions options);
  // POSTs `body` (JSON) to `path` on the endpoints in turn; the parsed JSON reply text.
  Result<std::string> Call(const std::string& path, const std::string& body);
  Result<bool> Txn(const std::string& body, const std::string& key, RangeResult* current);

  EtcdOptions options_;
  std::mutex mu_;  // guards clients_ and preferred_
  // One client per endpoint, each keeping its connection alive for the unary calls.
  std::vector<std::unique_ptr<client::HttpClient>> clients_;
  size_t preferred_ = 0;  // the endpoint that answered last
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<int64_t> last_latency_us_{0};
};

// A running watch; destroying it stops its thread (within the stream's 100 ms poll).
class EtcdWatch {
 public:
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;
  // Whether the stream is open now (false while etcd is unreachable and the watch retries).
  bool connected() const { return connected_.load(); }
  // The last revision delivered (or the one the watch started from).
  int64_t revision() const { return next_revision_.load() - 1; }

 private:
  friend class EtcdClient;
  EtcdWatch(EtcdClient* client, std::string prefix, int64_t start_revision,
            EtcdClient::EventsFn on_events, EtcdClient::CompactedFn on_compacted);
  void Run();
  // Streams one connection; returns when it breaks or the watch stops.
  void StreamOnce(const std::string& endpoint);

  EtcdClient* client_;
  std::string prefix_;
  EtcdClient::EventsFn on_events_;
  EtcdClient::CompactedFn on_compacted_;
  std::atomic<int64_t> next_revision_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> end_stream_{false};  // ends the stream now: stopping, or history compacted
  std::atomic<bool> connected_{false};
  std::string partial_;  // a JSON line not yet complete
  std::thread thread_;
};

}  // namespace shoal::cluster
