// Connection: a function's streamed answer (Server-Sent Events from the lm inference function).
// The instance sends kResponseChunk descriptors, each a pool buffer with one piece, then the
// kResponse that ends it; the client gets the head with Transfer-Encoding: chunked at the first
// piece and one HTTP chunk per piece (several when its socket lags), then the zero chunk.
#include <cstdio>

#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/gateway/connection.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/dataplane/gateway/gateway_loop.h"
#include "shoal/dataplane/gateway/response_head.h"

namespace shoal {

void Connection::WriteFunctionChunk(const EventDescriptor& d,
                                    const std::shared_ptr<FunctionRuntime>& fn) {
  uint64_t offset = d.offset;
  PayloadView v = ReadPayload(fn->pool->Data(offset));
  if (!v.valid) {
    ReleaseBuffer(fn, offset, "malformed response piece");
    spdlog::warn("function '{}' sent a malformed response piece: closing its client's connection",
                 fn->spec.name);
    streaming_ = false;
    Close();  // the request is abandoned: its instance's kResponse is dropped when it comes
    return;
  }
  if (!streaming_) {
    streaming_ = true;
    stream_end_ = false;
    stream_status_ = v.status ? v.status : 200;
    // Pieces show the instance is working: the function's timeout no longer applies.
    uv_timer_stop(&timer_);
    ResponseHead head(
        resp_head_, stream_status_,
        v.content_type.empty() ? std::string_view("application/octet-stream") : v.content_type,
        ResponseHead::kChunked);
    head.Header("Cache-Control", "no-cache");
    head.Finish(keep_open());
    stream_out_ = resp_head_;
  }
  AppendChunk(std::string_view(reinterpret_cast<const char*>(v.body.data()), v.body.size()));
  ReleaseBuffer(fn, offset, "response piece");
  FlushStream();
}

void Connection::EndStream(const EventDescriptor& d, const std::shared_ptr<FunctionRuntime>& fn) {
  uint64_t offset = d.offset;
  if (d.kind == static_cast<uint16_t>(EventKind::kResponse) && offset != 0) {
    PayloadView v = ReadPayload(fn->pool->Data(offset));
    if (v.valid) {
      AppendChunk(std::string_view(reinterpret_cast<const char*>(v.body.data()), v.body.size()));
    }
  }
  if (offset != 0) ReleaseBuffer(fn, offset, "response");
  RecordFunctionStats(*fn, stream_status_);
  stream_out_ += "0\r\n\r\n";
  stream_end_ = true;
  FlushStream();
}

void Connection::AppendChunk(std::string_view bytes) {
  if (bytes.empty()) return;  // an empty chunk would end the body
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  stream_out_.append(size, static_cast<size_t>(n));
  stream_out_.append(bytes);
  stream_out_ += "\r\n";
}

void Connection::FlushStream() {
  if (writing_ || stream_out_.empty() || state_ == State::kClosing) return;
  stream_sending_.swap(stream_out_);
  stream_out_.clear();
  uv_buf_t buf = uv_buf_init(stream_sending_.data(), static_cast<unsigned>(stream_sending_.size()));
  // As StartWrite: not at once while a pipelined request waits (NextRequest would run it from
  // inside the loop's descriptor handling).
  const int sent =
      rbuf_len_ == 0 ? uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), &buf, 1) : UV_EAGAIN;
  if (sent < 0 && sent != UV_EAGAIN) {
    streaming_ = false;
    Close();
    return;
  }
  const size_t skip = sent > 0 ? static_cast<size_t>(sent) : 0;
  if (skip == stream_sending_.size()) {
    if (stream_end_) OnStreamWritten(0);
    return;
  }
  buf.base += skip;
  buf.len -= static_cast<unsigned>(skip);
  writing_ = true;
  if (uv_write(&write_req_, reinterpret_cast<uv_stream_t*>(&tcp_), &buf, 1,
               &Connection::OnWritten) != 0) {
    writing_ = false;
    streaming_ = false;
    Close();
  }
}

void Connection::OnStreamWritten(int status) {
  if (status != 0 || close_after_ || state_ == State::kClosing) {
    streaming_ = false;
    Close();
    return;
  }
  if (!stream_out_.empty()) {
    FlushStream();
    return;
  }
  if (stream_end_) {
    streaming_ = false;
    stream_end_ = false;
    stream_sending_.clear();
    NextRequest();
  }
}

}  // namespace shoal
