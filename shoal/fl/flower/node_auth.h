// SuperNode authentication on the Fleet API's REST transport, as Flower 1.42's SuperLink does it
// (flwr/superlink/routers/fleet/node_auth.py): every request carries the node's EC public key
// (`flwr-public-key`: base64 of its PEM), a timestamp (`flwr-timestamp`: ISO 8601 with its UTC
// offset) and an ECDSA-SHA256 signature of that timestamp's ASCII bytes (`flwr-signature`:
// base64 of DER). A request is let in when the signature verifies with the key and the timestamp
// is at most kTimestampToleranceS old (kClockDriftS of drift either way); RegisterNode and
// ActivateNode must name the same key in their body, every other call a node id registered with
// that key (the service checks that: fleet_service.cc). So no node acts as another, and a node
// reaches only the job it registered with.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::flower {

// Flower's TIMESTAMP_TOLERANCE and SYSTEM_TIME_TOLERANCE (flwr/common/constant.py).
inline constexpr double kTimestampToleranceS = 300;
inline constexpr double kClockDriftS = 5;

// The three headers as the gateway read them (empty when absent).
struct NodeAuthHeaders {
  std::string public_key;  // flwr-public-key
  std::string signature;   // flwr-signature
  std::string timestamp;   // flwr-timestamp
};

// The node's public key (its PEM bytes, as RegisterNode carries them) when the headers
// authenticate at `now`; kUnauthenticated naming what is wrong otherwise.
Result<std::string> AuthenticateNode(const NodeAuthHeaders& h,
                                     std::chrono::system_clock::time_point now);

// Who a Fleet request says it is: field 1 of every Fleet request is the node (a Node message,
// or its id for DeactivateNode and UnregisterNode) or, for RegisterNode and ActivateNode, the
// node's public key. Read without parsing the rest of the body (a PushObject carries arrays).
struct RequestIdentity {
  bool has_key = false;
  std::string public_key;
  uint64_t node_id = 0;
};
// kInvalidArgument when the body is not protobuf wire format up to its field 1.
Result<RequestIdentity> IdentityOf(std::string_view body);

// Seconds since the epoch of an ISO 8601 date-time with a UTC offset
// ("2026-11-29T19:55:01.123+00:00" or "...Z"), as Python's datetime.isoformat writes it;
// kInvalidArgument otherwise.
Result<double> ParseIsoTimestamp(const std::string& text);

}  // namespace shoal::flower
