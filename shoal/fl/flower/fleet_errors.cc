#include "shoal/fl/flower/fleet_errors.h"

#include <nlohmann/json.hpp>

namespace shoal::flower {

HttpReply FlowerError(int http_status, int code, std::string_view detail, std::string_view extra) {
  nlohmann::json j = {{"code", code}, {"detail", detail}};
  if (!extra.empty()) j["extra"] = extra;
  HttpReply r;
  r.status = http_status;
  r.content_type = "application/json";
  r.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

HttpReply FastApiError(int http_status, std::string_view detail) {
  HttpReply r;
  r.status = http_status;
  r.content_type = "application/json";
  r.body = nlohmann::json{{"detail", detail}}.dump();
  return r;
}

HttpReply Proto(const google::protobuf::MessageLite& m) {
  HttpReply r;
  r.status = 200;
  r.content_type = "application/protobuf";
  m.SerializeToString(&r.body);
  return r;
}

bool Parse(google::protobuf::MessageLite& m, std::string_view body) {
  return m.ParseFromArray(body.data(), static_cast<int>(body.size()));
}

}  // namespace shoal::flower
