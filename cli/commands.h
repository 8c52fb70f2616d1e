// The `shoal` subcommands. Each returns the process exit code: 0 success, 1 the server or the
// user said no (bad manifest, unknown function, HTTP >= 400), 2 shoald could not be reached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "http_client.h"

namespace shoal::cli {

struct InvokeOptions {
  std::string name;
  std::string data;     // "" = no body; "@FILE" streams FILE; "@-" reads stdin
  bool has_data = false;
  std::string method;   // "" = POST with data, GET without
  std::string path;     // below /fn/<name>/
  std::vector<std::string> headers;
};

int Deploy(const HttpClient& client, const std::string& file);
int Get(const HttpClient& client, const std::string& name, const std::string& output);
int Describe(const HttpClient& client, const std::string& name);
int Invoke(const HttpClient& client, const InvokeOptions& options);
int Logs(const HttpClient& client, const std::string& name, bool follow);
int Delete(const HttpClient& client, const std::string& name);
int Top(const HttpClient& client, bool watch);

// `shoal fl ...`: FL jobs (kind FLJob), through /v1/jobs.
int FlStatus(const HttpClient& client, const std::string& job);
int FlWatch(const HttpClient& client, const std::string& job);
// `format`: "safetensors" (the server's bytes) or "onnx" (the job's architecture graph with
// the version's weights, which other tools load).
int FlModel(const HttpClient& client, const std::string& job, const std::string& output,
            const std::optional<uint64_t>& version, const std::string& format = "safetensors");
int FlList(const HttpClient& client);
int FlDelete(const HttpClient& client, const std::string& job);

struct TokenOptions {
  std::string role, ns, job, name;
};
int TokenCreate(const HttpClient& client, const TokenOptions& options);
int TokenList(const HttpClient& client);
int TokenRevoke(const HttpClient& client, const std::string& id);

}  // namespace shoal::cli
