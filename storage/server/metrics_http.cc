#include "storage/server/metrics_http.h"

#include <exception>
#include <string_view>
#include <utility>

#include "core/logging.h"

namespace ptstore::storage {

namespace {

constexpr std::string_view kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kIndexPage =
    "<html><head><title>ptstored</title></head>\n"
    "<body><h1>ptstored</h1><p><a href=\"/metrics\">Metrics</a> (Prometheus text format)</p></body></html>\n";

core::HttpResponse Error(int code) {
  return core::HttpResponse::Text(code, std::to_string(code) + " " + core::HttpReasonPhrase(code) + "\n");
}

core::HttpServerOptions ToHttpOptions(const MetricsHttpOptions& o) {
  core::HttpServerOptions h;
  h.read_timeout_ms = o.read_timeout_ms;
  h.write_timeout_ms = o.write_timeout_ms;
  h.max_request_bytes = o.max_request_bytes;
  h.max_body_bytes = 1 << 20;  // a /query of a long prompt
  h.max_connections = o.max_connections;
  h.handler_threads = 0;
  h.name = "metrics";
  return h;
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(MetricsHttpOptions options) : http_(ToHttpOptions(options)) {}

Status MetricsHttpServer::Start(const std::string& bind, uint16_t port, Render render, Query query) {
  if (!render) return InvalidArgument("the metrics server needs a render function");
  return http_.Start(bind, port, [render = std::move(render), query = std::move(query)](const core::HttpRequest& req) {
    if (query && (req.path == "/query" || req.path == "/query_by_hash")) return query(req);
    if (req.method != "GET") {  // HEAD arrives as GET
      core::HttpResponse r = Error(405);
      r.headers.emplace_back("Allow", "GET, HEAD");
      return r;
    }
    core::HttpResponse r;
    if (req.path == "/metrics") {
      try {
        r.body = render();
        r.content_type = kMetricsType;
      } catch (const std::exception& e) {
        PTS_WARN("metrics", "rendering the metrics failed: " << e.what());
        r = Error(500);
      }
    } else if (req.path == "/") {
      r.body = std::string(kIndexPage);
      r.content_type = "text/html; charset=utf-8";
    } else {
      r = Error(404);
    }
    return r;
  });
}

}  // namespace ptstore::storage
