// --plot DIR: the run over time as whitespace-separated data files, gnuplot scripts, and
// the PNG charts gnuplot draws from them (throughput and requests in flight; TTFT and
// end-to-end latency per request; the server's queue, KV blocks, state slots and RSS).
// Without gnuplot on PATH the data and scripts are still written. One thread; blocks while
// gnuplot runs (after the run, never during it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadtest/request_plan.h"

namespace deltaserve::loadtest {

// One tick of the sampler. Server fields are NaN when the scrape (or /proc) failed.
struct TimelineSample {
  double t_s = 0.0;
  int64_t num_in_flight = 0;
  int64_t num_finished = 0;
  double output_tokens_per_s = 0.0;  // tokens reported by usage since the previous tick
  double running = 0.0, waiting = 0.0, kv_blocks_used = 0.0, state_slots_used = 0.0;
  double rss_mib = 0.0;
};

// Returns the files written, or throws std::runtime_error when DIR cannot be written.
// `messages` receives one line per chart that could not be drawn.
std::vector<std::string> write_plots(const std::string& dir, const std::vector<TimelineSample>& timeline,
                                     const std::vector<RequestResult>& results,
                                     std::vector<std::string>& messages);

}  // namespace deltaserve::loadtest
