// What the tool reads about the server besides its answers: single HTTP calls on their own
// connection (/metrics, /v1/models, /tokenize, /health), the Prometheus text parsed into
// series, and the process' resident memory and open sockets from /proc/<pid> (the server
// exports neither as a metric).
// Threading: the coroutines run on the tool's I/O thread; the parsers are pure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "loadtest/http_connection.h"

namespace deltaserve::loadtest {

struct HttpCallResult {
  unsigned status = 0;  // 0: no answer (error says why)
  std::string body;
  std::string error;
};

// One request on a fresh connection (Connection: close), bounded by `timeout`.
net::awaitable<HttpCallResult> http_call(const ServerUrl& url, std::string method, std::string path,
                                         std::string body, std::string api_key, Clock::duration timeout);

// Series of one scrape, keyed as exposed: `name` or `name{label="v",...}`.
struct MetricsSample {
  bool ok = false;
  std::string error;
  std::map<std::string, double, std::less<>> series;

  std::optional<double> get(std::string_view key) const;
  double sum(std::string_view name) const;  // every series of that metric name
  bool has_prefix(std::string_view prefix) const;
};

MetricsSample parse_prometheus_text(std::string_view text);

net::awaitable<MetricsSample> scrape_metrics(const ServerUrl& url, Clock::duration timeout);

struct ProcSample {
  bool ok = false;
  std::string error;
  double rss_mib = 0.0;      // VmRSS
  int64_t num_threads = 0;
  int64_t num_fds = 0;
  int64_t num_sockets = 0;   // fds that are sockets: the listener plus open connections
};

// Reads /proc/<pid>/status and /proc/<pid>/fd; ok = false when the process is gone.
ProcSample read_proc(int64_t pid);

}  // namespace deltaserve::loadtest
