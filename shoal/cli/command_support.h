// What the CLI's commands share: the request that exits with a clear message when shoald
// cannot be reached or refuses the token, JSON getters that tolerate missing fields, and the
// Exit a command throws to end with a code once its message is printed.
#pragma once

#include <istream>
#include <nlohmann/json.hpp>
#include <string>

#include "shoal/common/http/http_client.h"

namespace shoal::cli {

using nlohmann::json;
using shoal::client::HttpClient;
using shoal::client::HttpRequest;
using shoal::client::HttpResponse;

// Unwinds to main with an exit code once the message is printed.
struct Exit {
  int code;
};

// Sends `request`; an unreachable shoald (exit 2) or a refused token (exit 1) is printed and
// thrown as Exit.
HttpResponse SendOrExit(const HttpClient& client, const HttpRequest& request);
// The server's {"error": "..."} message, or the raw body when it is not that.
std::string ErrorMessage(const std::string& body);
// DELETE `path`: prints `done` when it went, else the server's message; the command's exit code.
int DeleteAndReport(const HttpClient& client, const std::string& path, const std::string& done);
// GET `path` expecting JSON; HTTP errors print the server's message and exit 1.
json GetJson(const HttpClient& client, const std::string& path);
// j[key] when it is a number (a string), else T{} ("").
template <typename T>
T Num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return T{};
  return j[key].get<T>();
}

std::string Str(const json& j, const char* key);
std::string ReadAll(std::istream& in);
// A watch loop's pause between redraws.
void SleepSeconds(double s);

}  // namespace shoal::cli
