#include "loadtest/plot_writer.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace deltaserve::loadtest {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTerminal = "set terminal png size 1100,520\n";

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// gnuplot skips "NaN" fields (a failed scrape) instead of drawing them as 0.
std::string number(double value) { return std::isnan(value) ? std::string("NaN") : std::to_string(value); }

std::string timeline_text(const std::vector<TimelineSample>& timeline) {
  std::ostringstream out;
  out << "# t_s in_flight finished output_tok_per_s running waiting kv_blocks_used state_slots_used rss_mib\n";
  for (const TimelineSample& s : timeline) {
    out << s.t_s << ' ' << s.num_in_flight << ' ' << s.num_finished << ' ' << s.output_tokens_per_s << ' '
        << number(s.running) << ' ' << number(s.waiting) << ' ' << number(s.kv_blocks_used) << ' '
        << number(s.state_slots_used) << ' ' << number(s.rss_mib) << '\n';
  }
  return out.str();
}

std::string requests_text(const std::vector<RequestResult>& results) {
  std::ostringstream out;
  out << "# start_s ttft_ms e2e_ms stream_tok_per_s completion_tokens kind\n";
  for (const RequestResult& r : results) {
    const bool completed = r.status == 200 && !r.finish_reason.empty() && !r.cancelled && r.failure.empty();
    if (r.warmup || !completed) continue;
    out << r.start_s << ' ' << (r.ttft_ms >= 0.0 ? std::to_string(r.ttft_ms) : "NaN") << ' ' << r.e2e_ms << ' '
        << r.decode_tokens_per_s << ' ' << r.completion_tokens << ' ' << request_kind_name(r.kind) << '\n';
  }
  return out.str();
}

struct Chart {
  const char* name;
  const char* script;
};

const Chart kCharts[] = {
    {"throughput",
     "set title 'Output tokens/s (server usage) and requests in flight'\n"
     "set xlabel 'time since the tool started (s)'\nset ylabel 'tokens/s'\nset y2label 'requests in flight'\n"
     "set ytics nomirror\nset y2tics\nset grid\n"
     "plot 'timeline.dat' using 1:4 with lines lw 2 title 'output tokens/s', "
     "'' using 1:2 axes x1y2 with steps title 'in flight'\n"},
    {"latency",
     "set title 'Per request: time to first token and end to end'\n"
     "set xlabel 'request start, since the tool started (s)'\nset ylabel 'ms'\nset logscale y\nset grid\n"
     "plot 'requests.dat' using 1:3 with points pt 7 ps 0.4 title 'end to end', "
     "'' using 1:2 with points pt 7 ps 0.4 title 'time to first token'\n"},
    {"server",
     "set title 'Server (from /metrics and /proc)'\n"
     "set xlabel 'time since the tool started (s)'\nset ylabel 'count'\nset y2label 'RSS (MiB)'\n"
     "set ytics nomirror\nset y2tics\nset grid\n"
     "plot 'timeline.dat' using 1:5 with steps title 'running', '' using 1:6 with steps title 'waiting', "
     "'' using 1:7 with lines title 'KV blocks used', '' using 1:8 with steps title 'state slots used', "
     "'' using 1:9 axes x1y2 with lines lw 2 title 'RSS MiB'\n"},
};

}  // namespace

std::vector<std::string> write_plots(const std::string& dir, const std::vector<TimelineSample>& timeline,
                                     const std::vector<RequestResult>& results,
                                     std::vector<std::string>& messages) {
  if (dir.find('\'') != std::string::npos) throw std::runtime_error("--plot: a quote in the path: " + dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  std::vector<std::string> written;
  write_file(fs::path(dir) / "timeline.dat", timeline_text(timeline));
  write_file(fs::path(dir) / "requests.dat", requests_text(results));
  written.push_back((fs::path(dir) / "timeline.dat").string());
  written.push_back((fs::path(dir) / "requests.dat").string());
  const bool have_gnuplot = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  if (!have_gnuplot) messages.push_back("gnuplot not found: wrote the data and scripts, no PNG");
  for (const Chart& chart : kCharts) {
    const std::string script_name = std::string(chart.name) + ".gp";
    const std::string png_name = std::string(chart.name) + ".png";
    write_file(fs::path(dir) / script_name,
               std::string(kTerminal) + "set output '" + png_name + "'\n" + chart.script);
    written.push_back((fs::path(dir) / script_name).string());
    if (!have_gnuplot) continue;
    // gnuplot runs in DIR so the scripts name their files relative to it.
    const std::string command = "cd '" + dir + "' && gnuplot " + script_name + " 2>/dev/null";
    if (std::system(command.c_str()) == 0) {
      written.push_back((fs::path(dir) / png_name).string());
    } else {
      messages.push_back("gnuplot failed on " + script_name);
    }
  }
  return written;
}

}  // namespace deltaserve::loadtest
