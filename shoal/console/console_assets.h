// The web console's files (index.html, console.js and the modules it imports, console.css and
// Debian's Chart.js), compiled into the binary at build time by shoal/console/embed_assets.cmake,
// and the reply a listener gives for GET /ui/...: the page is static (it holds no data; every
// number on it comes from /v1 calls that carry the user's bearer token), so it is served without a
// token.
#pragma once

#include <span>
#include <string_view>

#include "shoal/interfaces/http_reply.h"

namespace shoal::console {

struct Asset {
  std::string_view path;          // below /ui/: "index.html", "console.js", ...
  std::string_view content_type;  // without parameters: "text/html", "text/javascript", ...
  std::string_view bytes;
};

// Every embedded file (generated: console_assets.cc in the build tree).
std::span<const Asset> Assets();

// The asset at `path` below /ui/ ("" and "index.html" are the page); nullptr when none.
const Asset* FindAsset(std::string_view path);

// Whether a listener should hand `path` to ServeUi: "/", "/ui" and everything below "/ui/".
bool IsUiPath(std::string_view path);

// The answer to GET `path` (IsUiPath): "/" and "/ui" redirect to "/ui/", a file is served with
// a Content-Security-Policy that allows this origin only, anything else is 404.
HttpReply ServeUi(std::string_view path);

}  // namespace shoal::console
