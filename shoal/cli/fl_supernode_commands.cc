// shoal fl supernode register|list|unregister: a Flower job's SuperNode allow-list (as `flwr
// supernode register|ls|unregister` against a SuperLink with --enable-supernode-auth), through
// /v1/jobs/{job}/flower/supernodes.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shoal/cli/command_support.h"
#include "shoal/cli/commands.h"
#include "shoal/cli/table.h"

namespace shoal::cli {

namespace {

std::string SupernodesPath(const std::string& job) {
  return "/v1/jobs/" + job + "/flower/supernodes";
}

}  // namespace

int FlSupernodeRegister(const HttpClient& client, const std::string& job,
                        const std::string& key_file) try {
  std::ifstream in(key_file, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) {
    std::fprintf(stderr, "shoal: cannot read the public key file '%s'\n", key_file.c_str());
    return 2;
  }
  const std::string body = json{{"publicKey", text.str()}}.dump();  // req.body views it
  HttpRequest req;
  req.method = "POST";
  req.path = SupernodesPath(job);
  req.body = body;
  req.headers = {"Content-Type: application/json"};
  HttpResponse r = SendOrExit(client, req);
  if (r.status >= 400) {
    std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
    return 1;
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("nodeId")) {
    std::fprintf(stderr, "shoal: unexpected reply: %s\n", r.body.c_str());
    return 1;
  }
  std::printf("SuperNode %s registered in job %s.\n", Str(j, "nodeId").c_str(), job.c_str());
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int FlSupernodeList(const HttpClient& client, const std::string& job) try {
  const json j = GetJson(client, SupernodesPath(job));
  Table t({"NODE-ID", "STATUS", "CLIENT", "PUBLIC-KEY"});
  for (const json& n : j.value("supernodes", json::array())) {
    // The key's base64 body, cut: enough to tell keys apart.
    std::string key = Str(n, "publicKey");
    const size_t body = key.find('\n');
    key = body == std::string::npos ? key : key.substr(body + 1, 24) + "...";
    t.AddRow({Str(n, "nodeId"), Str(n, "status"), Str(n, "client").empty() ? "-" : Str(n, "client"),
              key});
  }
  std::fputs(t.Render().c_str(), stdout);
  return 0;
} catch (const Exit& e) {
  return e.code;
}

int FlSupernodeUnregister(const HttpClient& client, const std::string& job,
                          const std::string& node_id) try {
  HttpRequest req;
  req.method = "DELETE";
  req.path = SupernodesPath(job) + "/" + node_id;
  HttpResponse r = SendOrExit(client, req);
  if (r.status >= 400) {
    std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
    return 1;
  }
  std::printf("SuperNode %s unregistered from job %s.\n", node_id.c_str(), job.c_str());
  return 0;
} catch (const Exit& e) {
  return e.code;
}

}  // namespace shoal::cli
