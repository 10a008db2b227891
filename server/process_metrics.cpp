#include "server/process_metrics.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace deltaserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;

prometheus::Gauge& gauge(prometheus::Registry& r, const char* name, const char* help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}

// The fields of /proc/self/stat after the command name (which may hold spaces and ')'):
// fields[0] is field 3 (state) of proc(5).
std::vector<std::string> stat_fields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 1));
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// Seconds since the epoch at which the system booted (btime of /proc/stat).
double boot_time_s() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double t = 0.0;
      in >> t;
      return t;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0.0;
}

}  // namespace

ProcessMetrics::ProcessMetrics(prometheus::Registry& r)
    : resident_bytes_(gauge(r, "process_resident_memory_bytes", "Resident memory size in bytes.")),
      virtual_bytes_(gauge(r, "process_virtual_memory_bytes", "Virtual memory size in bytes.")),
      open_fds_(gauge(r, "process_open_fds", "Number of open file descriptors.")),
      max_fds_(gauge(r, "process_max_fds", "Maximum number of open file descriptors (soft limit).")),
      cpu_seconds_(BuildCounter()
                       .Name("process_cpu_seconds_total")
                       .Help("Total user and system CPU time spent in seconds.")
                       .Register(r)
                       .Add({})),
      start_time_s_(gauge(r, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.")),
      http_responses_(BuildCounter()
                          .Name("deltaserve_http_responses_total")
                          .Help("HTTP responses sent, by route (a fixed set; 'other' for unknown paths) and status code.")
                          .Register(r)) {
  refresh();
}

void ProcessMetrics::refresh() {
  const std::vector<std::string> f = stat_fields();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // proc(5) numbering: utime 14, stime 15, starttime 22, vsize 23, rss 24 -> f[n - 3].
  if (f.size() > 21 && ticks > 0) {
    const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
    if (cpu > cpu_seconds_seen_) {
      cpu_seconds_.Increment(cpu - cpu_seconds_seen_);
      cpu_seconds_seen_ = cpu;
    }
    start_time_s_.Set(boot_time_s() + std::stod(f[19]) / ticks);
    virtual_bytes_.Set(std::stod(f[20]));
    resident_bytes_.Set(std::stod(f[21]) * page);
  }
  std::error_code ec;
  int64_t num_fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    ++num_fds;
  }
  open_fds_.Set(static_cast<double>(num_fds > 0 ? num_fds - 1 : 0));  // less the iterator's own
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    max_fds_.Set(limit.rlim_cur == RLIM_INFINITY ? -1.0 : static_cast<double>(limit.rlim_cur));
  }
}

void ProcessMetrics::count_response(std::string_view route, int status) {
  http_responses_.Add({{"route", std::string(route)}, {"status", std::to_string(status)}}).Increment();
}

}  // namespace deltaserve::server
