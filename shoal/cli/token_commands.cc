// shoal token create|list|revoke: the control API's bearer tokens.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "shoal/cli/command_support.h"
#include "shoal/cli/commands.h"
#include "shoal/cli/fl_progress.h"
#include "shoal/cli/progress.h"
#include "shoal/cli/table.h"
#include "shoal/serving/export/model_onnx.h"

namespace shoal::cli {

int TokenCreate(const HttpClient& client, const TokenOptions& options) try {
  json body{{"role", options.role}};
  if (!options.ns.empty()) body["namespace"] = options.ns;
  if (!options.job.empty()) body["job"] = options.job;
  if (!options.name.empty()) body["name"] = options.name;
  const std::string text = body.dump();
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/tokens";
  req.body = text;
  req.headers = {"Content-Type: application/json"};
  HttpResponse r = SendOrExit(client, req);
  if (r.status >= 400) {
    std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
    return 1;
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("token")) {
    std::fprintf(stderr, "shoal: unexpected reply: %s\n", r.body.c_str());
    return 1;
  }
  // The token alone on stdout (for $(...)); what it is on stderr. It is not shown again.
  std::fprintf(stderr, "token %s (%s%s%s) created; it is shown once:\n", Str(j, "id").c_str(),
               Str(j, "role").c_str(),
               Str(j, "namespace").empty() ? "" : (", namespace " + Str(j, "namespace")).c_str(),
               Str(j, "job").empty() ? "" : (", job " + Str(j, "job")).c_str());
  std::printf("%s\n", Str(j, "token").c_str());
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int TokenList(const HttpClient& client) try {
  json j = GetJson(client, "/v1/tokens");
  Table t({"ID", "NAME", "ROLE", "NAMESPACE", "JOB", "AGE"});
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const json& tok : j.value("tokens", json::array())) {
    const double age_s = static_cast<double>(now - Num<int64_t>(tok, "created_unix_ms")) / 1000;
    t.AddRow({Str(tok, "id"), Str(tok, "name"), Str(tok, "role"),
              Str(tok, "namespace").empty() ? "-" : Str(tok, "namespace"),
              Str(tok, "job").empty() ? "-" : Str(tok, "job"), FormatAge(age_s)});
  }
  std::cout << t.Render();
  return 0;
} catch (const Exit& e) {
  return e.code;
}

}  // namespace shoal::cli
