#include <string>

#include "shoal/console/console_assets.h"

namespace shoal::console {
namespace {

// The page loads its script, styles and data from this origin only; Chart.js sets canvas
// sizes through element.style, which 'unsafe-inline' for styles keeps working. No frame may
// embed the page (it holds a token in sessionStorage).
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'none'";

}  // namespace

const Asset* FindAsset(std::string_view path) {
  if (path.empty()) path = "index.html";
  for (const Asset& a : Assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

bool IsUiPath(std::string_view path) {
  return path == "/" || path == "/ui" || path.starts_with("/ui/");
}

HttpReply ServeUi(std::string_view path) {
  HttpReply r;
  if (path == "/" || path == "/ui") {
    r.status = 302;
    r.content_type = "text/plain";
    r.body = "the console is at /ui/\n";
    r.headers.emplace_back("Location", "/ui/");
    return r;
  }
  const Asset* a = path.starts_with("/ui/") ? FindAsset(path.substr(4)) : nullptr;
  if (a == nullptr) {
    r.status = 404;
    r.body = "{\"error\": \"no such file of the console (it is at /ui/)\"}\n";
    return r;
  }
  r.content_type = std::string(a->content_type) + "; charset=utf-8";
  r.body = std::string(a->bytes);
  r.headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  // The files change only with the binary; revalidating every load is cheap on loopback.
  r.headers.emplace_back("Cache-Control", "no-cache");
  return r;
}

}  // namespace shoal::console
