// A user handler loaded from a shared library through the C ABI (handler_abi.h).
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "shoal/runtime/instance/handler.h"
#include "shoal/runtime/instance/handler_abi.h"

namespace shoal {
namespace {

struct CallContext {
  ResponseBuilder* response;
  std::string error;
  int error_status = 0;
};

uint8_t* AbiAlloc(void* ctx, size_t body_len, const char* content_type) {
  auto* c = static_cast<CallContext*>(ctx);
  auto span =
      c->response->Allocate(body_len, content_type ? content_type : "application/octet-stream");
  if (!span.ok()) return nullptr;
  return reinterpret_cast<uint8_t*>(span->data());
}

void AbiSetStatus(void* ctx, int status) {
  static_cast<CallContext*>(ctx)->response->SetStatus(status);
}

void AbiSetError(void* ctx, int status, const char* message) {
  auto* c = static_cast<CallContext*>(ctx);
  c->error_status = status;
  c->error = message ? message : "handler error";
}

class LibraryHandler final : public Handler {
 public:
  LibraryHandler(void* lib, shoal_handle_fn fn, std::string path, bool may_block)
      : lib_(lib), fn_(fn), path_(std::move(path)), may_block_(may_block) {}
  bool MayBlock() const override { return may_block_; }
  ~LibraryHandler() override { dlclose(lib_); }

  Status Handle(const Request& request, ResponseBuilder& response) override {
    // http_parser's method names are NUL-terminated constants: pass one of those.
    std::string method(request.method);
    shoal_request req{};
    req.method = method.c_str();
    req.path = request.path.data();
    req.path_len = request.path.size();
    req.query = request.query.data();
    req.query_len = request.query.size();
    req.content_type = request.content_type.data();
    req.content_type_len = request.content_type.size();
    req.body = reinterpret_cast<const uint8_t*>(request.body.data());
    req.body_len = request.body.size();
    CallContext ctx{&response, {}, 0};
    shoal_response resp{&ctx, &AbiAlloc, &AbiSetStatus, &AbiSetError};
    const int rc = fn_(&req, &resp);
    if (ctx.error_status != 0) {
      return Status(ctx.error_status >= 500 ? StatusCode::kInternal : StatusCode::kInvalidArgument,
                    ctx.error);
    }
    if (rc != 0) return Internal(path_ + ": handler returned " + std::to_string(rc));
    return {};
  }

 private:
  void* lib_;
  shoal_handle_fn fn_;
  std::string path_;
  bool may_block_;
};

}  // namespace

Result<std::unique_ptr<Handler>> LoadLibraryHandler(const std::string& path,
                                                    const std::string& symbol) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return NotFound(std::string("cannot load handler library: ") + dlerror());
  auto fn = reinterpret_cast<shoal_handle_fn>(dlsym(lib, symbol.c_str()));
  if (fn == nullptr) {
    dlclose(lib);
    return NotFound(path + ": no symbol '" + symbol + "'");
  }
  if (auto init = reinterpret_cast<shoal_init_fn>(dlsym(lib, "shoal_init")); init != nullptr) {
    if (int rc = init(); rc != 0) {
      dlclose(lib);
      return Internal(path + ": shoal_init returned " + std::to_string(rc));
    }
  }
  bool may_block = true;
  if (auto mb = reinterpret_cast<shoal_may_block_fn>(dlsym(lib, "shoal_may_block"))) {
    may_block = mb() != 0;
  }
  return std::unique_ptr<Handler>(new LibraryHandler(lib, fn, path, may_block));
}

}  // namespace shoal
