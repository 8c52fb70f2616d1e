#include "shoal/cli/command_support.h"

#include <chrono>
#include <cstdio>
#include <iterator>
#include <thread>

namespace shoal::cli {

int DeleteAndReport(const HttpClient& client, const std::string& path,
                    const std::string& done) try {
  HttpRequest req;
  req.method = "DELETE";
  req.path = path;
  HttpResponse r = SendOrExit(client, req);
  if (r.status >= 400) {
    std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
    return 1;
  }
  std::printf("%s\n", done.c_str());
  return 0;
} catch (const Exit& e) {
  return e.code;
}

HttpResponse SendOrExit(const HttpClient& client, const HttpRequest& request) {
  std::string error;
  auto r = client.Send(request, &error);
  if (!r) {
    std::fprintf(stderr, "shoal: cannot reach shoald at %s: %s\n", client.base_url().c_str(),
                 error.c_str());
    throw Exit{2};
  }
  if (r->status == 401) {
    auto j = json::parse(r->body, nullptr, false);
    const std::string msg =
        !j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string()
            ? j["error"].get<std::string>()
            : "unauthorized";
    std::fprintf(stderr,
                 "shoal: %s: %s\nshoal: give a token with SHOAL_TOKEN or `token:` in the config "
                 "file ($SHOAL_CONFIG or ~/.config/shoal/config); shoald saved the first admin's "
                 "in <state_dir>/admin.conf\n",
                 client.base_url().c_str(), msg.c_str());
    throw Exit{1};
  }
  return std::move(*r);
}

// The server's {"error": "..."} message, or the raw body when it is not that.
std::string ErrorMessage(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string()) {
    return j["error"].get<std::string>();
  }
  std::string b = body;
  while (!b.empty() && (b.back() == '\n' || b.back() == '\r')) b.pop_back();
  return b;
}

// GET `path` expecting JSON; HTTP errors print the server's message and exit 1.
json GetJson(const HttpClient& client, const std::string& path) {
  HttpRequest req;
  req.path = path;
  HttpResponse r = SendOrExit(client, req);
  if (r.status >= 400) {
    std::fprintf(stderr, "shoal: %s\n", ErrorMessage(r.body).c_str());
    throw Exit{1};
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "shoal: %s answered %s with something that is not JSON\n",
                 client.base_url().c_str(), path.c_str());
    throw Exit{1};
  }
  return j;
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

std::string ReadAll(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void SleepSeconds(double s) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(s * 1e6)));
}

}  // namespace shoal::cli
