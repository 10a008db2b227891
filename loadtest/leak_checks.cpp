#include "loadtest/leak_checks.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace deltaserve::loadtest {
namespace {

// A gauge that must come back to its idle value (or to 0 with `must_be_zero`).
Check gauge_check(const std::string& name, const std::string& metric, const ServerSnapshot& before,
                  const ServerSnapshot& after, bool must_be_zero) {
  Check c;
  c.name = name;
  c.source = metric;
  c.rule = must_be_zero ? "after == 0" : "after <= before";
  const std::optional<double> b = before.metrics.get(metric);
  const std::optional<double> a = after.metrics.get(metric);
  if (!before.metrics.ok || !after.metrics.ok) {
    c.note = "no /metrics scrape: " + (before.metrics.ok ? after.metrics.error : before.metrics.error);
    return c;
  }
  if (!b || !a) {
    c.note = "the server does not export " + metric;
    return c;
  }
  c.before = *b;
  c.after = *a;
  const bool ok = must_be_zero ? *a == 0.0 : *a <= *b;
  c.status = ok ? CheckStatus::Pass : CheckStatus::Fail;
  return c;
}

Check proc_check(const std::string& name, const std::string& field, double before, double after,
                 double bound, const ServerSnapshot& b, const ServerSnapshot& a, const std::string& rule) {
  Check c;
  c.name = name;
  c.source = field;
  c.rule = rule;
  if (!b.proc.ok || !a.proc.ok) {
    c.note = !b.proc.error.empty() ? b.proc.error
             : !a.proc.error.empty() ? a.proc.error
                                     : "no --server-pid (the server exports no such metric)";
    return c;
  }
  c.before = before;
  c.after = after;
  c.status = after - before <= bound ? CheckStatus::Pass : CheckStatus::Fail;
  return c;
}

// MiB of prefix-cache checkpoints that live in the server's host memory: the host tier, and the
// device tier too when the backend holds no device memory (the CPU backend).
double host_resident_cache_mib(const ServerSnapshot& s) {
  if (!s.metrics.ok) return 0.0;
  double bytes = s.metrics.get("deltaserve_prefix_cache_bytes{tier=\"host\"}").value_or(0.0);
  if (s.metrics.get("deltaserve_device_memory_used_bytes").value_or(0.0) == 0.0) {
    bytes += s.metrics.get("deltaserve_prefix_cache_bytes{tier=\"device\"}").value_or(0.0);
  }
  return bytes / (1024.0 * 1024.0);
}

// The server's open HTTP connections, after the tool closed its own: the scrape's own
// connection is in both counts, connections the tool still held at either snapshot are
// taken out, and whatever else was connected before (another scraper) may stay.
Check connections_check(const ServerSnapshot& before, const ServerSnapshot& after) {
  const std::string metric = "deltaserve_open_connections";
  Check c = gauge_check("server open connections", metric, before, after, false);
  c.rule = "after - client's <= before - client's";
  if (c.status == CheckStatus::Skipped) return c;
  c.before -= static_cast<double>(before.client_open_connections);
  c.after -= static_cast<double>(after.client_open_connections);
  c.status = c.after <= c.before ? CheckStatus::Pass : CheckStatus::Fail;
  if (c.status == CheckStatus::Fail) c.note = "connections the tool closed are still open on the server";
  return c;
}

std::string mib_rule(double bound_mib) {
  char text[64];
  std::snprintf(text, sizeof(text), "after - before <= %.0f MiB", bound_mib);
  return text;
}

}  // namespace

const char* check_status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::Pass: return "PASS";
    case CheckStatus::Fail: return "FAIL";
    case CheckStatus::Skipped: return "SKIP";
  }
  return "SKIP";
}

Check run_check(std::string name, std::string rule, double value, bool pass, std::string note) {
  Check c;
  c.name = std::move(name);
  c.source = "run";
  c.rule = std::move(rule);
  c.after = value;
  c.status = pass ? CheckStatus::Pass : CheckStatus::Fail;
  c.note = std::move(note);
  return c;
}

std::vector<Check> leak_checks(const ServerSnapshot& before, const ServerSnapshot& after,
                               const LoadOptions& options) {
  std::vector<Check> checks;
  checks.push_back(gauge_check("requests running", "deltaserve_requests_running", before, after, true));
  checks.push_back(gauge_check("requests waiting", "deltaserve_requests_waiting", before, after, true));
  checks.push_back(gauge_check("state slots used", "deltaserve_state_slots_used", before, after, false));
  checks.push_back(gauge_check("KV blocks used", "deltaserve_kv_blocks_used", before, after, false));
  checks.push_back(gauge_check("pinned host bytes", "deltaserve_pinned_host_bytes", before, after, false));
  checks.push_back(gauge_check("pinned registrations", "deltaserve_pinned_host_registrations", before,
                               after, false));

  // Device memory must come back to its starting value exactly (0 on the CPU backend).
  Check device = gauge_check("device memory used", "deltaserve_device_memory_used_bytes", before, after, false);
  device.rule = "after == before";
  if (device.status != CheckStatus::Skipped) {
    device.status = device.after == device.before ? CheckStatus::Pass : CheckStatus::Fail;
  } else if (before.metrics.ok && after.metrics.ok) {
    device.note = "the server exports no device-memory metric";
  }
  checks.push_back(device);
  checks.push_back(connections_check(before, after));

  // Errors the server itself counted as its own fault, including answers nobody read.
  Check errors;
  errors.name = "server errors counted";
  errors.source = "deltaserve_errors_total{type=\"server_error\"}";
  errors.rule = "after - before == 0";
  if (before.metrics.ok && after.metrics.ok) {
    errors.before = before.metrics.get(errors.source).value_or(0.0);
    errors.after = after.metrics.get(errors.source).value_or(0.0);
    errors.status = errors.after == errors.before ? CheckStatus::Pass : CheckStatus::Fail;
  } else {
    errors.note = "no /metrics scrape: " + (before.metrics.ok ? after.metrics.error : before.metrics.error);
  }
  checks.push_back(errors);

  checks.push_back(proc_check("server open sockets", "/proc/<pid>/fd sockets",
                              static_cast<double>(before.proc.num_sockets),
                              static_cast<double>(after.proc.num_sockets), 0.0, before, after,
                              "after <= before"));
  checks.push_back(proc_check("server threads", "/proc/<pid>/status Threads",
                              static_cast<double>(before.proc.num_threads),
                              static_cast<double>(after.proc.num_threads), 0.0, before, after,
                              "after <= before"));
  // The prefix cache holds checkpoints by design, within its configured budgets: their growth in
  // host memory (the host tier, and on a backend without device memory the device tier too) is
  // allowed on top of the bound; anything else that grows is a leak.
  const double cache_mib = host_resident_cache_mib(after) - host_resident_cache_mib(before);
  Check rss = proc_check("server resident memory (MiB)", "/proc/<pid>/status VmRSS", before.proc.rss_mib,
                         after.proc.rss_mib, options.rss_growth_bound_mib + std::max(0.0, cache_mib), before,
                         after, mib_rule(options.rss_growth_bound_mib));
  if (cache_mib > 0.0) {
    rss.rule += " + prefix-cache growth";
    rss.note = "the prefix cache's host-resident checkpoints grew by " + std::to_string(cache_mib) + " MiB";
  }
  checks.push_back(rss);

  Check client;
  client.name = "client connections open";
  client.source = "the tool's own count";
  client.rule = "after == 0";
  client.before = static_cast<double>(before.client_open_connections);
  client.after = static_cast<double>(after.client_open_connections);
  client.status = after.client_open_connections == 0 ? CheckStatus::Pass : CheckStatus::Fail;
  checks.push_back(client);
  return checks;
}

bool all_pass(const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    if (c.status == CheckStatus::Fail) return false;
  }
  return true;
}

}  // namespace deltaserve::loadtest
