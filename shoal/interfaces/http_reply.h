// An HTTP answer as a handler of the control routes gives it: the control API returns it,
// the gateway's fleet routes and the control listener write it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shoal {

// The request headers a control-thread service reads beyond its method, path and body: the
// Fleet API's SuperNode signature (flwr-public-key, flwr-signature, flwr-timestamp; Flower 1.42
// signs every Fleet call with them). Empty when absent; cut at kMaxServiceHeaderBytes.
struct ServiceHeaders {
  static constexpr size_t kMaxServiceHeaderBytes = 2048;
  std::string flwr_public_key, flwr_signature, flwr_timestamp;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body instead of `body` (large bytes held elsewhere, sent without a copy).
  std::shared_ptr<const std::string> shared_body;
};

}  // namespace shoal
