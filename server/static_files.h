// The built-in chat page: GET / (index.html) and GET /static/<file>, answered from bytes
// compiled into the binary. The sources live in server/static/ (plain HTML, JS and CSS, no
// build step); server/static/embed_static.cmake turns them into a generated static_assets.cpp
// at build time, so the daemon needs no files beside it to serve the page.
//
// The page talks to the daemon's own OpenAI endpoints (same origin), so a strict Content
// Security Policy applies: no inline script, no third-party origin.
// Thread-safe (read-only data); called on the session's strand from route_request.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "server/router.h"
#include "server/server_state.h"

namespace deltaserve::server {

struct StaticAsset {
  std::string_view path;          // "/static/chat.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;          // the file's bytes
};

// Every embedded file, sorted by path. Defined in the generated static_assets.cpp.
std::span<const StaticAsset> static_assets();

// The response for a page path ("/", "/index.html", "/static/..."): the file, a 404 for an
// unknown /static/ name, or a 405 for a method other than GET. nullopt for any other
// path, which the router then handles as before.
std::optional<HttpResponse> static_file_response(const HttpRequest& request, ServerState& state,
                                                 std::string_view path);

}  // namespace deltaserve::server
