#include "server/static_files.h"

#include <algorithm>
#include <string>

namespace deltaserve::server {
namespace {

// The page only ever talks to its own origin; everything else is refused by the browser.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const StaticAsset* find_asset(std::string_view path) {
  const auto assets = static_assets();
  const auto it = std::find_if(assets.begin(), assets.end(),
                               [&](const StaticAsset& a) { return a.path == path; });
  return it == assets.end() ? nullptr : &*it;
}

HttpResponse asset_response(const StaticAsset& asset, const HttpRequest& request,
                            const ServerState& state) {
  HttpResponse res{http::status::ok, request.version()};
  res.set(http::field::server, "deltaserve");
  res.set(http::field::content_type, asset.content_type);
  // no-cache: the browser revalidates, so a new binary's page is never mixed with an old one.
  res.set(http::field::cache_control, "no-cache");
  res.set("Content-Security-Policy", kContentSecurityPolicy);
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  res.keep_alive(keep_alive_after(request, state));
  res.body().assign(asset.body.data(), asset.body.size());
  res.prepare_payload();
  return res;
}

}  // namespace

std::optional<HttpResponse> static_file_response(const HttpRequest& request, ServerState& state,
                                                 std::string_view path) {
  const bool is_page = path == "/" || path == "/index.html" || path.rfind("/static/", 0) == 0;
  if (!is_page) return std::nullopt;
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    HttpResponse res = error_response(
        method_not_allowed(std::string(request.method_string()), std::string(path)), &request, state);
    res.set(http::field::allow, "GET");
    return res;
  }
  const StaticAsset* asset = find_asset(path.rfind("/static/", 0) == 0 ? path : "/static/index.html");
  if (!asset) {
    return error_response(not_found("unknown_url", "No static file " + std::string(path) + "."),
                          &request, state);
  }
  return asset_response(*asset, request, state);
}

}  // namespace deltaserve::server
