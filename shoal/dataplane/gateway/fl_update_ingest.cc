#include "shoal/dataplane/gateway/fl_update_ingest.h"

#include <algorithm>

#include "shoal/dataplane/gateway/gateway_loop.h"
#include "shoal/fl/wire/update_prefix.h"
#include "shoal/runtime/node/function_runtime.h"

namespace shoal {

static_assert(FlUpdateIngest::kAnnounceBytes % model::kUpdateAlignment == 0);

void FlUpdateIngest::Reset() {
  job_.clear();
  bearer_.clear();
  head_.clear();
  head_need_ = 0;
  prefix_read_ = false;
  discard_ = false;
  admitted_ = {};
  tried_ = false;
  lost_ = false;
  stream_.reset();
  announced_ = 0;
}

void FlUpdateIngest::Begin(std::string job, std::string bearer) {
  job_ = std::move(job);
  bearer_ = std::move(bearer);
}

FlUpdateIngest::HeadStep FlUpdateIngest::FeedHead(const char*& data, size_t& len,
                                                  uint64_t body_bytes, std::string* refusal) {
  for (;;) {
    const size_t take = std::min<uint64_t>(head_need_ - head_.size(), len);
    head_.append(data, take);
    data += take;
    len -= take;
    if (head_.size() < head_need_) return HeadStep::kMore;
    if (prefix_read_) return HeadStep::kWhole;
    prefix_read_ = true;
    auto hlen = model::ParsePrefix(head(), body_bytes);
    if (!hlen.ok()) {
      *refusal = hlen.status().message();
      return HeadStep::kRefused;
    }
    head_need_ = model::kUpdatePrefixBytes + *hlen;
  }
}

void FlUpdateIngest::OnBodyProgress(GatewayLoop& loop, Connection* conn, FlDataPath& fl,
                                    const std::shared_ptr<FunctionRuntime>& fn, uint64_t buffer,
                                    uint64_t body_offset, std::span<const std::byte> body,
                                    uint64_t arrived) {
  if (!active() || lost_ || body.size() < kMinStreamedBody || arrived >= body.size()) return;
  if (!stream_) {
    if (tried_ || arrived < model::kUpdatePrefixBytes) return;
    auto hlen = model::ParsePrefix(body.first(arrived), body.size());
    if (!hlen.ok()) {
      tried_ = true;  // refused once whole, with this message
      return;
    }
    // The header holds the tensor table: the leaf checks the structure before it folds.
    if (arrived < model::TensorAreaOffset(*hlen)) return;
    tried_ = true;
    if (!admitted()) {
      // A refusal is answered once the body is whole (Admit asked again then), as before.
      auto adm = fl.Admit(job_, *fn->pool, body.first(arrived), buffer);
      if (!adm.ok()) return;
      admitted_ = *adm;
    }
    stream_ = loop.StartBodyStream(conn, fn, buffer, admitted_);
    if (!stream_) return;  // no leaf free now: the admission goes with the whole body
    admitted_ = {};        // the stream's pending request carries the ticket now
    announced_ = 0;
  }
  if (arrived - announced_ < kAnnounceBytes) return;
  announced_ = arrived;
  loop.AnnounceBody(*stream_, body_offset + arrived);
}

}  // namespace shoal
