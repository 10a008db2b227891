// Process and HTTP metrics in the form every Prometheus dashboard expects (the names of the
// official clients' process collector): resident and virtual memory, open and maximum file
// descriptors, CPU seconds, start time, read from /proc/self at scrape time; and
// deltaserve_http_responses_total{route, status}, one count per response the daemon sends.
// refresh() is called by the scrape (one at a time); count_response() from any thread.
#pragma once

#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace deltaserve::server {

class ProcessMetrics {
 public:
  explicit ProcessMetrics(prometheus::Registry& registry);

  // Reads /proc/self/stat, /proc/self/fd and the descriptor limit into the gauges.
  void refresh();

  // `route` comes from router's route_label (a bounded set); `status` the HTTP status.
  void count_response(std::string_view route, int status);

 private:
  prometheus::Gauge& resident_bytes_;
  prometheus::Gauge& virtual_bytes_;
  prometheus::Gauge& open_fds_;
  prometheus::Gauge& max_fds_;
  prometheus::Counter& cpu_seconds_;
  prometheus::Gauge& start_time_s_;
  prometheus::Family<prometheus::Counter>& http_responses_;
  double cpu_seconds_seen_ = 0.0;
};

}  // namespace deltaserve::server
