// The Fleet API's answers as Flower's SuperLink writes them over HTTP: a protobuf body on
// success; on failure a JSON {"code": <ApiErrorCode>, "detail": <public message>} with the HTTP
// status Flower's error catalog gives the code (flwr 1.42, supercore/error).
#pragma once

#include <google/protobuf/message_lite.h>

#include <string>
#include <string_view>

#include "shoal/interfaces/http_reply.h"

namespace shoal::flower {

inline constexpr int kPublicKeyAlreadyInUse = 23;
inline constexpr int kInvalidProtobufPayload = 1003;
inline constexpr int kRegistrationDisabled = 2001;    // allow-listing: register via the CLI
inline constexpr int kUnregistrationDisabled = 2002;  // allow-listing: unregister via the CLI
inline constexpr int kInvalidHeartbeatInterval = 2003;
inline constexpr int kNodeActivationFailed = 2004;
inline constexpr int kNodeDeactivationFailed = 2005;
inline constexpr int kNodeUnregistrationFailed = 2006;
inline constexpr int kGetRunFailed = 2008;
inline constexpr int kGetFabFailed = 2009;

inline constexpr double kHeartbeatMinInterval = 10, kHeartbeatMaxInterval = 1800;
inline constexpr double kHeartbeatPatience = 2;  // beats missed before a node is offline

inline bool ValidHeartbeatInterval(double s) {
  return s >= kHeartbeatMinInterval && s <= kHeartbeatMaxInterval;
}

// `extra`: Flower's optional public details.
HttpReply FlowerError(int http_status, int code, std::string_view detail,
                      std::string_view extra = {});
// FastAPI's own answers (unknown route, wrong method): {"detail": ...}.
HttpReply FastApiError(int http_status, std::string_view detail);
inline HttpReply InvalidPayload() {
  return FlowerError(400, kInvalidProtobufPayload, "Invalid protobuf payload.");
}
HttpReply Proto(const google::protobuf::MessageLite& m);
bool Parse(google::protobuf::MessageLite& m, std::string_view body);

}  // namespace shoal::flower
