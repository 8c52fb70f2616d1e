#include <cstring>

#include "shoal/common/buffer_release.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {

ResponseBuilder::~ResponseBuilder() {
  if (response_offset_ != 0)
    ReleaseOrLog(pool_, response_offset_, slot_, "unsent response", "function instance");
}

Result<std::span<std::byte>> ResponseBuilder::Allocate(size_t size, std::string_view content_type) {
  if (response_offset_ != 0) return InvalidArgument("response body allocated twice");
  if (content_type.size() > 255) content_type = content_type.substr(0, 255);
  body_offset_ = PayloadBodyOffset(0, 0, content_type.size());
  auto off = pool_.Allocate(body_offset_ + size, slot_);
  if (!off.ok()) return off.status();
  response_offset_ = *off;
  body_size_ = size;
  content_type_ = std::string(content_type);
  echo_ = false;
  return pool_.Data(response_offset_).subspan(body_offset_, size);
}

Status ResponseBuilder::SendPiece(std::string_view bytes, std::string_view content_type) {
  if (!piece_sink_) return Unavailable("this function instance cannot stream an answer");
  if (content_type.size() > 255) content_type = content_type.substr(0, 255);
  const size_t body_offset = PayloadBodyOffset(0, 0, content_type.size());
  auto off = pool_.Allocate(body_offset + bytes.size(), slot_);
  if (!off.ok()) return off.status();
  std::span<std::byte> buf = pool_.Data(*off);
  std::memcpy(buf.data() + body_offset, bytes.data(), bytes.size());
  WritePayloadHead(buf, 0, static_cast<uint16_t>(status_), {}, {}, content_type, bytes.size());
  if (Status st = pool_.Transfer(*off, slot_, kShoaldSlot); !st.ok()) {
    ReleaseOrLog(pool_, *off, slot_, "response piece", "function instance");
    return st;
  }
  streamed_ = true;
  piece_sink_(*off, body_offset + bytes.size(), status_);
  return {};
}

void ResponseBuilder::Discard() {
  if (response_offset_ != 0)
    ReleaseOrLog(pool_, response_offset_, slot_, "discarded response", "function instance");
  response_offset_ = 0;
  body_size_ = 0;
  echo_ = false;
}

void ResponseBuilder::Shrink(size_t size) {
  if (size < body_size_) body_size_ = size;
}

Result<std::pair<uint64_t, uint64_t>> ResponseBuilder::Finish() {
  if (echo_) {
    // The request buffer becomes the response: only the status in its head changes.
    std::span<std::byte> buf = pool_.Data(request_offset_);
    if (buf.size() < sizeof(PayloadHead)) return Internal("request buffer vanished");
    PayloadHead head;
    std::memcpy(&head, buf.data(), sizeof head);
    head.status = static_cast<uint16_t>(status_);
    std::memcpy(buf.data(), &head, sizeof head);
    return std::make_pair(request_offset_, uint64_t{head.body_offset} + head.body_length);
  }
  if (response_offset_ == 0) {
    auto body = Allocate(0, "text/plain");
    if (!body.ok()) return body.status();
  }
  std::span<std::byte> buf = pool_.Data(response_offset_);
  WritePayloadHead(buf, 0, static_cast<uint16_t>(status_), {}, {}, content_type_, body_size_);
  ReleaseOrLog(pool_, request_offset_, slot_, "answered request", "function instance");
  const uint64_t off = response_offset_;
  response_offset_ = 0;  // ownership passes to the caller
  return std::make_pair(off, uint64_t{body_offset_} + body_size_);
}

}  // namespace shoal
