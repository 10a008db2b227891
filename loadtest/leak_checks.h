// The soak's pass/fail checks. Leak checks compare a snapshot of the idle server taken
// after the warmup ("before") with one taken once the run has drained ("after"): state
// slots, KV blocks, pinned bytes and registrations, device memory (exactly) and the server's
// open connections (net of the tool's own) must come back, requests running and waiting
// must be 0, open sockets and threads must not grow, resident memory may grow at
// most by the stated bound, and the server must have counted no server_error. What the
// server does not export is read from /proc/<pid> (with --server-pid) or reported as not
// checked, with the reason. Pure functions; one thread.
#pragma once

#include <string>
#include <vector>

#include "loadtest/load_options.h"
#include "loadtest/server_probe.h"

namespace deltaserve::loadtest {

struct ServerSnapshot {
  MetricsSample metrics;
  ProcSample proc;        // ok = false without --server-pid
  int64_t client_open_connections = 0;
};

enum class CheckStatus { Pass, Fail, Skipped };
const char* check_status_name(CheckStatus status);

struct Check {
  std::string name;
  std::string source;  // the metric or /proc field it reads
  std::string rule;    // "after <= before", "after - before <= 64 MiB", ...
  double before = 0.0;
  double after = 0.0;
  CheckStatus status = CheckStatus::Skipped;
  std::string note;    // why skipped, or what failed
};

std::vector<Check> leak_checks(const ServerSnapshot& before, const ServerSnapshot& after,
                               const LoadOptions& options);

// True when every leak check that can be evaluated passes (the settle loop polls this).
bool all_pass(const std::vector<Check>& checks);

// A check of the run itself (not before/after): value must satisfy `pass`.
Check run_check(std::string name, std::string rule, double value, bool pass, std::string note = "");

}  // namespace deltaserve::loadtest
