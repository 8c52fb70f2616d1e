// The `shoal` subcommands. Each returns the process exit code: 0 success, 1 the server or the
// user said no (bad manifest, unknown function, HTTP >= 400), 2 shoald could not be reached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shoal/common/http/http_client.h"

namespace shoal::cli {

using shoal::client::HttpClient;
using shoal::client::HttpRequest;
using shoal::client::HttpResponse;

struct InvokeOptions {
  std::string name;
  std::string data;  // "" = no body; "@FILE" streams FILE; "@-" reads stdin
  bool has_data = false;
  std::string method;  // "" = POST with data, GET without
  std::string path;    // below /fn/<name>/
  std::vector<std::string> headers;
};

// Each of `files` (a manifest, "-" for stdin, or a directory: its *.yaml, *.yml and *.json in
// name order) is one request, applied all or nothing; with several, a terminal shows n/N.
int Deploy(const HttpClient& client, const std::vector<std::string>& files);
int Get(const HttpClient& client, const std::string& name, const std::string& output);
// `shoal get nodes [NAME]` (nodes.cc): a controller's /v1/nodes, or a standalone shoald itself.
int GetNodes(const HttpClient& client, const std::string& name, const std::string& output);
int Describe(const HttpClient& client, const std::string& name);
int Invoke(const HttpClient& client, const InvokeOptions& options);
int Logs(const HttpClient& client, const std::string& name, bool follow);
struct WatchOptions {
  bool watch = true;      // keep refreshing (top: -w)
  double interval_s = 1;  // between refreshes
  bool json = false;      // -o json: one JSON object per refresh, one a line
};
// `watch` on a terminal redraws in place (cursor home, clear to the end of the screen).
int Top(const HttpClient& client, const WatchOptions& options);

// `shoal fl ...`: FL jobs (kind FLJob), through /v1/jobs.
int FlStatus(const HttpClient& client, const std::string& job);
// A progress bar toward the job's stop condition redrawn in place on a terminal; elsewhere one
// plain line (or JSON object) per new version or evaluation. 0 once the job is done; 1 when it
// fails or is deleted.
int FlWatch(const HttpClient& client, const std::string& job, const WatchOptions& options);
// `format`: "safetensors" (the server's bytes) or "onnx" (the job's architecture graph with
// the version's weights, which other tools load).
int FlModel(const HttpClient& client, const std::string& job, const std::string& output,
            const std::optional<uint64_t>& version, const std::string& format = "safetensors");
int FlList(const HttpClient& client);
// `shoal fl supernode ...`: a Flower job's SuperNode allow-list (`key_file`: the node's .pub,
// OpenSSH ecdsa or PEM, as `flwr supernode register` takes it).
int FlSupernodeRegister(const HttpClient& client, const std::string& job,
                        const std::string& key_file);
int FlSupernodeList(const HttpClient& client, const std::string& job);
int FlSupernodeUnregister(const HttpClient& client, const std::string& job,
                          const std::string& node_id);

struct TokenOptions {
  std::string role, ns, job, name;
};
int TokenCreate(const HttpClient& client, const TokenOptions& options);
int TokenList(const HttpClient& client);

}  // namespace shoal::cli
