#include "loadtest/server_probe.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/asio/this_coro.hpp>

#include "loadtest/request_runner.h"

namespace deltaserve::loadtest {

net::awaitable<HttpCallResult> http_call(const ServerUrl& url, std::string method, std::string path,
                                         std::string body, std::string api_key, Clock::duration timeout) {
  HttpCallResult out;
  ConnectionCounters counters;
  HttpConnection c(co_await net::this_coro::executor, counters);
  const Clock::time_point deadline = Clock::now() + timeout;
  beast::error_code ec = co_await c.connect(url, deadline);
  if (!ec) {
    ec = co_await c.write(build_request(method, url.base_path + path, url.host, body, api_key, false),
                          deadline);
  }
  if (!ec) ec = co_await c.read_header(deadline);
  if (!ec) {
    out.status = c.status();
    ec = co_await c.read_body_all(out.body, 64 << 20, deadline);
  }
  if (ec) {
    out.status = 0;
    out.error = describe_error(ec) + " calling " + method + " " + path;
  }
  c.close();
  co_return out;
}

std::optional<double> MetricsSample::get(std::string_view key) const {
  const auto it = series.find(key);
  if (it == series.end()) return std::nullopt;
  return it->second;
}

double MetricsSample::sum(std::string_view name) const {
  double total = 0.0;
  for (auto it = series.lower_bound(name); it != series.end(); ++it) {
    const std::string_view key = it->first;
    if (key.substr(0, name.size()) != name) break;
    if (key.size() == name.size() || key[name.size()] == '{') total += it->second;
  }
  return total;
}

bool MetricsSample::has_prefix(std::string_view prefix) const {
  const auto it = series.lower_bound(prefix);
  return it != series.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix;
}

MetricsSample parse_prometheus_text(std::string_view text) {
  MetricsSample sample;
  sample.ok = true;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    // The value follows the last space outside the label set (label values may hold spaces).
    const size_t close = line.rfind('}');
    const size_t space = line.find(' ', close == std::string_view::npos ? 0 : close);
    if (space == std::string_view::npos) continue;
    const std::string value_text(line.substr(space + 1, line.find(' ', space + 1) - space - 1));
    double value = 0.0;
    try {
      value = std::stod(value_text);  // also "+Inf", "NaN"
    } catch (const std::exception&) {
      continue;
    }
    sample.series[std::string(line.substr(0, space))] = value;
  }
  return sample;
}

net::awaitable<MetricsSample> scrape_metrics(const ServerUrl& url, Clock::duration timeout) {
  const HttpCallResult r = co_await http_call(url, "GET", "/metrics", "", "", timeout);
  if (r.status != 200) {
    MetricsSample failed;
    failed.error = r.status ? "GET /metrics answered " + std::to_string(r.status) : r.error;
    co_return failed;
  }
  co_return parse_prometheus_text(r.body);
}

ProcSample read_proc(int64_t pid) {
  ProcSample s;
  const std::filesystem::path dir = "/proc/" + std::to_string(pid);
  std::ifstream status(dir / "status");
  if (!status) {
    s.error = "cannot read " + (dir / "status").string() + " (process gone?)";
    return s;
  }
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t value = 0;
    fields >> key >> value;
    if (key == "VmRSS:") s.rss_mib = static_cast<double>(value) / 1024.0;  // kB
    if (key == "Threads:") s.num_threads = value;
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "fd", ec)) {
    ++s.num_fds;
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), link_ec).string();
    if (!link_ec && target.rfind("socket:", 0) == 0) ++s.num_sockets;
  }
  if (ec) {
    s.error = "cannot list " + (dir / "fd").string() + ": " + ec.message();
    return s;
  }
  s.ok = true;
  return s;
}

}  // namespace deltaserve::loadtest
