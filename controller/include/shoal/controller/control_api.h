// The control API behind every `/v1/...` path of the gateway: deploy, list, describe and delete
// functions, read their logs, and the node's load (`shoal top`). Pure request -> reply; JSON in
// and out, errors as {"error": "..."} with the matching HTTP status.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/controller/registry.h"
#include "shoal/controller/runtime_view.h"

namespace shoal {

inline constexpr const char* kShoalVersion = "0.1.0";

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class ControlApi {
 public:
  ControlApi(FunctionRegistry& registry, RuntimeView& runtime);

  // `path` starts with /v1/; `query` is the part after '?', without it.
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view query,
                   std::string_view body);

 private:
  HttpReply Deploy(std::string_view body);
  HttpReply ListFunctions();
  HttpReply GetFunction(const std::string& name);
  HttpReply DeleteFunction(const std::string& name);
  HttpReply Logs(const std::string& name, std::string_view query);
  HttpReply Top();
  HttpReply Node();

  FunctionRegistry& registry_;
  RuntimeView& runtime_;
};

}  // namespace shoal
