// The handler interface that a function instance (shoal-fn) runs: built-in C++ handlers and
// user libraries behind the C ABI (handler_abi.h) both implement it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "shoal/common/buffer_pool.h"
#include "shoal/common/load_report.h"
#include "shoal/common/status.h"

namespace shoal {

struct Request {
  std::string_view method;  // "GET", "POST", ...
  std::string_view path;    // after /fn/<name>; "" or "/..."
  std::string_view query;
  std::string_view content_type;
  std::span<const std::byte> body;  // in place, in the pool
  // A second pool buffer the sender named for this request (FL leaves: the partial sum to
  // fold into), and a number that goes with it (the update's weight). Empty when none.
  std::span<std::byte> aux;
  float aux_value = 0;
  // OnBodyArriving: the bytes of `body` that have landed (the rest is not there yet). Handle:
  // body.size().
  uint64_t arrived = 0;
  // Handle: the client left before the body (announced through OnBodyArriving) arrived whole;
  // the handler drops what it began and answers an error, which nobody reads.
  bool client_gone = false;
};

// Builds the response of one request in the pool. A handler either allocates a body and
// writes into it, or answers with the request's own body (zero copy), or leaves the body empty.
class ResponseBuilder {
 public:
  ResponseBuilder(BufferPool& pool, HolderSlot slot, uint64_t request_offset)
      : pool_(pool), slot_(slot), request_offset_(request_offset) {}
  ~ResponseBuilder();
  ResponseBuilder(const ResponseBuilder&) = delete;
  ResponseBuilder& operator=(const ResponseBuilder&) = delete;

  // Room for `size` body bytes; kResourceExhausted when the pool is full.
  Result<std::span<std::byte>> Allocate(size_t size, std::string_view content_type);
  // Keeps only the first `size` bytes of what Allocate returned.
  void Shrink(size_t size);
  // The response is the request's body, with the request's content type.
  void EchoRequest() { echo_ = true; }
  // Drops whatever body was allocated or echoed (to answer with an error instead).
  void Discard();
  void SetStatus(int status) { status_ = status; }
  int status() const { return status_; }
  // The handler changed the request's aux buffer although it answers with an error (the FL
  // leaf: a refused update whose first blocks were folded into the partial sum). The reply
  // says so (EventDescriptor::aux_offset), whatever the answer; Discard keeps it.
  void MarkAuxChanged() { aux_changed_ = true; }
  bool aux_changed() const { return aux_changed_; }

  // Streams: sends `bytes` now as one piece of the answer (a pool buffer of its own, handed to
  // the gateway at once); the first piece fixes the status and the content type, and the body
  // that Finish seals, if any, is the last piece. The gateway writes the pieces to the client as
  // HTTP chunks (Server-Sent Events). Unavailable where the builder has no piece sink.
  Status SendPiece(std::string_view bytes, std::string_view content_type);
  bool streamed() const { return streamed_; }
  // Where pieces go (the function instance: a kResponseChunk descriptor per piece). Takes the
  // buffer (offset, length), already transferred to shoald's slot.
  using PieceSink = std::function<void(uint64_t offset, uint64_t length, int status)>;
  void SetPieceSink(PieceSink sink) { piece_sink_ = std::move(sink); }

  // Seals the response: returns the offset and total length of the buffer to send back, now
  // held by this instance's slot (the request buffer is released unless it was echoed).
  // The caller transfers it to the next hop. On failure nothing is held.
  Result<std::pair<uint64_t, uint64_t>> Finish();

 private:
  BufferPool& pool_;
  HolderSlot slot_;
  uint64_t request_offset_;
  uint64_t response_offset_ = 0;
  size_t body_offset_ = 0;
  size_t body_size_ = 0;
  std::string content_type_;
  int status_ = 200;
  bool echo_ = false;
  bool aux_changed_ = false;
  bool streamed_ = false;
  PieceSink piece_sink_;
};

class Handler {
 public:
  virtual ~Handler() = default;
  // Runs on one of the instance's worker threads; may be called concurrently up to the
  // function's concurrency. An error Status becomes an HTTP error with its message.
  virtual Status Handle(const Request& request, ResponseBuilder& response) = 0;
  // True when Handle may wait (sleep, I/O): the instance then runs requests on `concurrency`
  // worker threads. A handler that only computes runs inline on the instance's event loop,
  // which saves a thread hand-off per request; more cores come from more instances.
  virtual bool MayBlock() const { return true; }
  // Called once, before the first request, with the tenant pool's whole mapping in this
  // process: a handler that moves pool bytes to a GPU pins it here (cudaHostRegister), once.
  virtual void OnPoolAttached(void* /*base*/, size_t /*bytes*/) {}
  // Called once in the instance itself, after OnPoolAttached: where the handler starts its
  // threads. A zygote loads the handler and attaches the pool, then forks; a fork copies only
  // the calling thread, so threads started before here would be missing in every instance
  // (and a zygote with more than one thread refuses to fork: its instances are spawned).
  virtual Status OnInstanceStart() { return {}; }
  // True for a handler that reads whole large pool buffers (the FL leaf folds every update):
  // its instances install their page-table entries beside the event loop instead of faulting
  // on each 4 KiB they touch: for the whole pool once where shoald pre-faulted it
  // (pool_prefault; 0.1-0.2 s of a core per GiB of 4 KiB pages), else for the pages shoald's
  // warm-ahead has allocated, as it moves (pool_warm_bytes). Others start without it.
  virtual bool PopulatesPool() const { return false; }
  // Part of a request's body has landed (request.arrived bytes of request.body); the same
  // request comes to Handle once it is whole (or with client_gone). Called in order on the
  // instance's event loop, for inline handlers (MayBlock false) only, and only for requests
  // whose sender announces their body (the gateway does for FL updates): a handler may start
  // on the bytes there, e.g. fold them. The default waits for Handle.
  virtual void OnBodyArriving(const Request& /*request*/) {}
  // The FL job this function follows committed `version` (shoald's kJobCommitted notice, sent
  // from the coordinator's commit to the instances of the functions that name the job). Called
  // on the instance's event loop: return at once (wake a thread of the handler's own). The
  // default ignores it.
  virtual void OnJobCommitted(uint64_t /*version*/) {}
  // Where the handler reports its load beyond the requests in flight (shoal/common/
  // load_report.h): set once the instance is made (after OnInstanceStart, before the first
  // request); callable from any thread.
  using LoadReportSink = std::function<void(const LoadReport&)>;
  virtual void SetLoadReportSink(LoadReportSink /*sink*/) {}
};

// Built-in handlers: echo, sha256, wordcount, sleep; fl-leaf and inference are loaded from
// their modules on first use (builtin_module.h).
Result<std::unique_ptr<Handler>> CreateBuiltinHandler(std::string_view name);
// A user handler from a shared library implementing handler_abi.h.
Result<std::unique_ptr<Handler>> LoadLibraryHandler(const std::string& path,
                                                    const std::string& symbol);

}  // namespace shoal
