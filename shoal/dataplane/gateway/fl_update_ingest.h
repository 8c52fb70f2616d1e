// An FL update's way in through a gateway connection (POST /v1/jobs/{job}/updates): the
// protocol beside the generic HTTP Connection, which only moves bytes and calls it at each step.
//
// - Job on this node: the body is received into the pool; once its prefix, header and tensor
//   table have landed the coordinator admits it (FlDataPath::Admit), a leaf is picked, and the
//   leaf is told of each part of the tensor area as it lands (kBodyChunk descriptors through
//   the loop: no call, the leaf folds on its own loop), so that when the last byte lands only
//   the last part is left to fold before the 202 (issue 34). No leaf free at once, or a small
//   body: the update goes to a leaf once whole, as any request.
// - Job whose top is on another node: only the prefix and header are read (into head()) and
//   sent to the top; the body is read into the pool once it admitted the update (then as above).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "shoal/common/status.h"
#include "shoal/interfaces/fl_data_path.h"

namespace shoal {

class Connection;
class GatewayLoop;
struct FunctionRuntime;

class FlUpdateIngest {
 public:
  // Tensor-area bytes landed between two announcements to the leaf: each costs a descriptor and
  // a wake-up of the leaf; the 202 waits for at most this much fold after the last byte.
  static constexpr uint64_t kAnnounceBytes = uint64_t{1} << 20;
  // Smaller bodies are folded once whole (nothing to overlap).
  static constexpr uint64_t kMinStreamedBody = 4 * kAnnounceBytes;

  // A new request (none of it is an FL update until Begin).
  void Reset();
  // The request is an update for `job`; `bearer` set: its top is on another node and
  // authenticates that token.
  void Begin(std::string job, std::string bearer);
  bool active() const { return !job_.empty(); }
  const std::string& job() const { return job_; }
  bool for_other_top() const { return !bearer_.empty(); }
  const std::string& bearer() const { return bearer_; }

  // ---- top on another node: the header before the body -----------------------------------
  void StartHead() { head_need_ = kPrefixBytes; }
  bool reading_head() const { return head_need_ != 0; }
  enum class HeadStep { kMore, kWhole, kRefused };
  // Takes what the header still needs from `data` (advanced past it). kRefused: `refusal` says
  // why (the client's 400).
  HeadStep FeedHead(const char*& data, size_t& len, uint64_t body_bytes, std::string* refusal);
  std::span<const std::byte> head() const { return std::as_bytes(std::span(head_)); }
  // After a refusal was answered: drop the rest of the body before the close.
  void set_discard(bool d) { discard_ = d; }
  bool discard() const { return discard_; }

  // ---- admission and folding while the body arrives ---------------------------------------
  // The coordinator's (or the top's) admission, taken before the body was whole.
  void SetAdmitted(FlAdmission a) { admitted_ = a; }
  bool admitted() const { return admitted_.ticket != 0; }
  FlAdmission TakeAdmitted() { return std::exchange(admitted_, {}); }

  // After each read of a Content-Length body into `buffer` of `fn`'s pool: `body` is the whole
  // declared body, `arrived` bytes of it there. Admits the update on its head (job on this
  // node), starts the leaf's stream, announces what landed.
  void OnBodyProgress(GatewayLoop& loop, Connection* conn, FlDataPath& fl,
                      const std::shared_ptr<FunctionRuntime>& fn, uint64_t buffer,
                      uint64_t body_offset, std::span<const std::byte> body, uint64_t arrived);
  // A leaf folds the body as it arrives: the pending request's index on the loop.
  std::optional<uint32_t> stream() const { return stream_; }
  // The leaf's stream is gone (its instance died): its ticket was finished (the partial sum is
  // rebuilt without it); the client gets a 502 once the body is whole, and sends it again.
  void StreamLost() {
    stream_.reset();
    admitted_ = {};
    lost_ = true;
  }
  bool lost() const { return lost_; }
  // The body is whole (or the client left): the stream's end goes to the loop.
  void EndStream() { stream_.reset(); }

 private:
  static constexpr uint64_t kPrefixBytes = 8;

  std::string job_;
  std::string bearer_;
  std::string head_;          // the prefix + UpdateHeader (top on another node)
  uint64_t head_need_ = 0;    // bytes of it known so far to be needed; 0: not reading a head
  bool prefix_read_ = false;  // the prefix (magic, header length) checked
  bool discard_ = false;
  FlAdmission admitted_{};
  bool tried_ = false;  // admission on the head tried (refusals are answered once whole)
  bool lost_ = false;
  std::optional<uint32_t> stream_;
  uint64_t announced_ = 0;  // body bytes the leaf has been told of
};

}  // namespace shoal
