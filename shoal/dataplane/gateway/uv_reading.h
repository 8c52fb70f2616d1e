// Reading a libuv TCP handle on and off: start and stop do nothing when it already is (is not)
// being read, so callers toggle it without tracking uv_read_start themselves.
#pragma once

#include <uv.h>

namespace shoal {

class UvReading {
 public:
  bool on() const { return on_; }
  void Start(uv_tcp_t& tcp, uv_alloc_cb alloc, uv_read_cb read) {
    if (on_) return;
    on_ = true;
    uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp), alloc, read);
  }
  void Stop(uv_tcp_t& tcp) {
    if (!on_) return;
    on_ = false;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
  }

 private:
  bool on_ = false;  // uv_read_start is in effect
};

}  // namespace shoal
