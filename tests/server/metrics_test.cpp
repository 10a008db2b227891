// /metrics exposition: a format check of the text (a small parser of the Prometheus text
// format 0.0.4), the names the dashboards rely on, the vLLM switch, and the derived rates.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "server/metrics.h"

namespace deltaserve::server {
namespace {

struct Sample {
  std::string name;
  std::string labels;
  double value = 0.0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family -> counter | gauge | histogram
  std::vector<Sample> samples;
};

// Parses the text format and fails the test on any malformed line: HELP and TYPE precede
// their samples, names and labels are well formed, values parse, histograms carry
// monotone cumulative buckets ending in +Inf equal to _count, counters end in _total.
Exposition parse_exposition(const std::string& text) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*)?\})? ([-+0-9.eEIinfNa]+)$)");
  Exposition ex;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(std::regex_match(name, kName)) << line;
      helped.insert(name);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << line;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      ex.types[name] = type;
    } else if (std::regex_match(line, m, kSample)) {
      Sample s{m[1], m[3], 0.0};
      const std::string value = m[7];
      s.value = value == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(value);
      std::string family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string sfx = suffix;
        if (family.size() > sfx.size() && family.compare(family.size() - sfx.size(), sfx.size(), sfx) == 0 &&
            ex.types.count(family.substr(0, family.size() - sfx.size()))) {
          family = family.substr(0, family.size() - sfx.size());
        }
      }
      EXPECT_TRUE(ex.types.count(family)) << "sample without TYPE: " << line;
      ex.samples.push_back(s);
    } else {
      ADD_FAILURE() << "malformed line: " << line;
    }
  }
  for (const auto& [name, type] : ex.types) {
    if (type == "counter") {
      EXPECT_TRUE(name.size() > 6 && name.substr(name.size() - 6) == "_total") << name;
    }
    if (type != "histogram") continue;
    // Per label set: buckets cumulative, +Inf == _count.
    std::map<std::string, std::vector<double>> buckets;
    std::map<std::string, double> counts;
    for (const Sample& s : ex.samples) {
      if (s.name == name + "_bucket") {
        const std::string key = std::regex_replace(s.labels, std::regex(R"(,?le="[^"]*")"), "");
        buckets[key].push_back(s.value);
      } else if (s.name == name + "_count") {
        counts[s.labels] = s.value;
      }
    }
    EXPECT_FALSE(buckets.empty()) << name;
    for (const auto& [key, values] : buckets) {
      for (size_t i = 1; i < values.size(); ++i) EXPECT_LE(values[i - 1], values[i]) << name;
      EXPECT_EQ(values.back(), counts[key]) << name << " " << key;
    }
  }
  return ex;
}

double value_of(const Exposition& ex, const std::string& name, const std::string& labels = "") {
  for (const Sample& s : ex.samples) {
    if (s.name == name && (labels.empty() || s.labels.find(labels) != std::string::npos)) return s.value;
  }
  ADD_FAILURE() << "no sample " << name << " {" << labels << "}";
  return -1.0;
}

EngineLimits limits() {
  EngineLimits l;
  l.max_streams = 4;
  l.context_tokens = 4096;
  l.max_draft_depth = 2;
  return l;
}

scheduler::EngineStats stats() {
  scheduler::EngineStats s;
  s.num_running = 2;
  s.num_waiting = 1;
  s.num_kv_blocks_used = 10;
  s.num_kv_blocks_total = 40;
  s.num_state_slots_used = 2;
  s.num_state_slots_total = 4;
  s.num_preemptions = 3;
  s.num_cancellations = 5;
  s.pinned_bytes = 1 << 20;
  s.pinned_registrations = 1;
  s.device_bytes_used = int64_t{3} << 30;
  s.device_bytes_total = int64_t{141} << 30;
  return s;
}

void feed(ServerMetrics& m) {
  m.on_step({4.0, 12, 2, 8, 3});
  m.on_inter_token(7, 20.0);
  m.on_inter_token(7, 10.0);
  m.on_inter_token(8, 5.0);
  m.on_drafts(0, 2, 1);
  m.on_drafts(1, 1, 0);
  m.on_request_finished({8, scheduler::FinishReason::Stop, 10, 5, 1.0, 20.0, 100.0, 50.0});
  m.on_error("invalid_request_error");
  m.on_response_finished(ResponseEnd::Stop);
}

TEST(Metrics, ExpositionIsWellFormedAndComplete) {
  ServerMetrics m({"tiny", false, 10.0, {}});
  m.set_limits(limits());
  feed(m);
  const scheduler::EngineStats s = stats();
  const Exposition ex = parse_exposition(m.render(&s, true));
  for (const char* name :
       {"deltaserve_requests_running", "deltaserve_requests_waiting", "deltaserve_prompt_tokens_total",
        "deltaserve_generation_tokens_total", "deltaserve_generation_tokens_per_second",
        "deltaserve_stream_decode_tokens_per_second", "deltaserve_request_decode_tokens_per_second",
        "deltaserve_time_to_first_token_seconds", "deltaserve_inter_token_latency_seconds",
        "deltaserve_e2e_request_latency_seconds", "deltaserve_request_queue_time_seconds",
        "deltaserve_step_duration_seconds", "deltaserve_step_rows", "deltaserve_kv_blocks_used",
        "deltaserve_kv_blocks_capacity", "deltaserve_state_slots_used", "deltaserve_state_slots_capacity",
        "deltaserve_preemptions_total", "deltaserve_cancellations_total", "deltaserve_errors_total",
        "deltaserve_pinned_host_bytes", "deltaserve_pinned_host_registrations",
        "deltaserve_spec_decode_num_drafts_total", "deltaserve_spec_decode_num_draft_tokens_total",
        "deltaserve_spec_decode_num_accepted_tokens_total",
        "deltaserve_spec_decode_num_accepted_tokens_per_pos_total", "deltaserve_build_info",
        "deltaserve_requests_finished_total", "deltaserve_device_memory_used_bytes",
        "deltaserve_device_memory_total_bytes", "deltaserve_ready", "deltaserve_open_connections"}) {
    EXPECT_TRUE(ex.types.count(name)) << name;
  }
  EXPECT_EQ(value_of(ex, "deltaserve_requests_running"), 2);
  EXPECT_EQ(value_of(ex, "deltaserve_device_memory_used_bytes"), double(int64_t{3} << 30));
  EXPECT_EQ(value_of(ex, "deltaserve_device_memory_total_bytes"), double(int64_t{141} << 30));
  EXPECT_EQ(value_of(ex, "deltaserve_ready"), 1);
  EXPECT_EQ(value_of(ex, "deltaserve_open_connections"), 0);
  EXPECT_EQ(value_of(ex, "deltaserve_build_info", "version=\""), 1);
  EXPECT_EQ(value_of(ex, "deltaserve_build_info", "backend=\""), 1);
  EXPECT_EQ(value_of(ex, "deltaserve_build_info", "commit=\""), 1);
  EXPECT_EQ(value_of(ex, "deltaserve_kv_blocks_capacity"), 40);
  EXPECT_EQ(value_of(ex, "deltaserve_preemptions_total"), 3);
  EXPECT_EQ(value_of(ex, "deltaserve_generation_tokens_total"), 3);
  EXPECT_EQ(value_of(ex, "deltaserve_prompt_tokens_total"), 10);
  EXPECT_EQ(value_of(ex, "deltaserve_inter_token_latency_seconds_count"), 3);
  EXPECT_EQ(value_of(ex, "deltaserve_errors_total", "invalid_request_error"), 1);
  EXPECT_EQ(value_of(ex, "deltaserve_errors_total", "authentication_error"), 0);
  EXPECT_EQ(value_of(ex, "deltaserve_spec_decode_num_drafts_total"), 2);
  EXPECT_EQ(value_of(ex, "deltaserve_spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\""), 1);
  // Request 8 finished: its slot is idle again; request 7 still streams at about 1/15 ms.
  EXPECT_EQ(value_of(ex, "deltaserve_stream_decode_tokens_per_second", "slot=\"1\""), 0);
  EXPECT_NEAR(value_of(ex, "deltaserve_stream_decode_tokens_per_second", "slot=\"0\""), 1000.0 / 18.0, 1.0);
  EXPECT_GT(value_of(ex, "deltaserve_generation_tokens_per_second"), 0.0);
  EXPECT_FALSE(ex.types.count("vllm:num_requests_running"));
}

// The speculation policy's choices and predictions: depths per stream and step, and the
// predicted step time and measured/predicted ratio of decode steps that were predicted.
TEST(Metrics, SpeculationPolicyIsObservable) {
  ServerMetrics m({"tiny", false, 10.0, {}});
  m.set_limits(limits());
  scheduler::StepReport decode{8.0, 10, 4, 0, 9};
  decode.predicted_step_ms = 5.0;
  decode.draft_depths[0] = 1;
  decode.draft_depths[2] = 3;
  m.on_step(decode);
  m.on_step({20.0, 100, 1, 90, 1});  // a prefill step: no prediction, no stream that may draft
  const scheduler::EngineStats s = stats();
  const Exposition ex = parse_exposition(m.render(&s, true));
  EXPECT_EQ(ex.types.at("deltaserve_spec_decode_draft_depth"), "histogram");
  EXPECT_EQ(value_of(ex, "deltaserve_spec_decode_draft_depth_count"), 4);
  EXPECT_EQ(value_of(ex, "deltaserve_spec_decode_draft_depth_sum"), 6);
  EXPECT_EQ(value_of(ex, "deltaserve_spec_decode_predicted_step_duration_seconds_count"), 1);
  EXPECT_DOUBLE_EQ(value_of(ex, "deltaserve_spec_decode_predicted_step_duration_seconds_sum"), 0.005);
  EXPECT_EQ(value_of(ex, "deltaserve_spec_decode_step_time_ratio_count"), 1);
  EXPECT_DOUBLE_EQ(value_of(ex, "deltaserve_spec_decode_step_time_ratio_sum"), 1.6);
  EXPECT_EQ(value_of(ex, "deltaserve_step_duration_seconds_count"), 2);
}

TEST(Metrics, CountersFromTheEngineSnapshotAdvanceByDelta) {
  ServerMetrics m({"tiny", false, 10.0, {}});
  m.set_limits(limits());
  scheduler::EngineStats s = stats();
  m.render(&s, true);
  s.num_cancellations += 2;
  const Exposition ex = parse_exposition(m.render(&s, true));
  EXPECT_EQ(value_of(ex, "deltaserve_cancellations_total"), 7);
}

// Preempted sequences' re-admissions have their own prefix-cache series: the requests' hit
// rate (hits / queries, hit tokens / query tokens) counts prefixes shared, not recomputation
// avoided; vLLM's names count the requests' share only, as vLLM does.
TEST(Metrics, PreemptedReadmissionsAreCountedApartFromTheRequestsPrefixCacheHits) {
  ServerMetrics m({"tiny", true, 10.0, {}});
  m.set_limits(limits());
  scheduler::EngineStats s = stats();
  s.prefix_cache_enabled = true;
  s.prefix_cache_queries = 4;
  s.prefix_cache_hits = 1;
  s.prefix_cache_query_tokens = 400;
  s.prefix_cache_hit_tokens = 96;
  s.prefix_cache_preempted_queries = 3;
  s.prefix_cache_preempted_hits = 3;
  s.prefix_cache_preempted_query_tokens = 360;
  s.prefix_cache_preempted_hit_tokens = 330;
  const Exposition ex = parse_exposition(m.render(&s, true));
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_queries_total"), 4);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_hits_total"), 1);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_query_tokens_total"), 400);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_hit_tokens_total"), 96);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_preempted_queries_total"), 3);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_preempted_hits_total"), 3);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_preempted_query_tokens_total"), 360);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_preempted_hit_tokens_total"), 330);
  EXPECT_EQ(value_of(ex, "vllm:prefix_cache_queries_total", "model_name=\"tiny\""), 400);
  EXPECT_EQ(value_of(ex, "vllm:prefix_cache_hits_total", "model_name=\"tiny\""), 96);
}

// Two scrapes at once take their engine snapshots before the scrape lock, so they may render
// out of order: the older snapshot must not lower the base and make the growth count twice.
TEST(Metrics, SnapshotsRenderedOutOfOrderCountGrowthOnce) {
  ServerMetrics m({"tiny", false, 10.0, {}});
  m.set_limits(limits());
  scheduler::EngineStats older = stats();
  m.render(&older, true);
  scheduler::EngineStats newer = older;
  newer.num_cancellations += 2;
  newer.num_preemptions += 1;
  newer.prefix_cache_hits += 3;
  m.render(&newer, true);
  m.render(&older, true);  // the slower of two concurrent scrapes
  const Exposition ex = parse_exposition(m.render(&newer, true));
  EXPECT_EQ(value_of(ex, "deltaserve_cancellations_total"), older.num_cancellations + 2);
  EXPECT_EQ(value_of(ex, "deltaserve_preemptions_total"), older.num_preemptions + 1);
  EXPECT_EQ(value_of(ex, "deltaserve_prefix_cache_hits_total"), older.prefix_cache_hits + 3);
}

TEST(Metrics, VllmNamesBehindTheSwitch) {
  ServerMetrics m({"tiny", true, 10.0, {}});
  m.set_limits(limits());
  feed(m);
  const scheduler::EngineStats s = stats();
  const Exposition ex = parse_exposition(m.render(&s, true));
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:request_success_total", "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds", "vllm:iteration_tokens_total",
        "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
        "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total"}) {
    EXPECT_TRUE(ex.types.count(name)) << name;
  }
  EXPECT_EQ(value_of(ex, "vllm:num_requests_running", "model_name=\"tiny\""), 2);
  EXPECT_DOUBLE_EQ(value_of(ex, "vllm:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(value_of(ex, "vllm:request_success_total", "finished_reason=\"stop\""), 1);
  EXPECT_TRUE(ex.types.count("deltaserve_requests_running"));  // ours stay
}

TEST(Metrics, RenderWhileLoadingHasNoEngineGauges) {
  ServerMetrics m({"tiny", false, 10.0, {}});
  Exposition ex;
  EXPECT_NO_FATAL_FAILURE(ex = parse_exposition(m.render(nullptr, false)));
  EXPECT_EQ(value_of(ex, "deltaserve_ready"), 0);
}

TEST(Metrics, OpenConnectionsFollowTheTickets) {
  ServerMetrics m({"tiny", false, 10.0, {}});
  {
    const ServerMetrics::ConnectionTicket a = m.open_connection();
    {
      const ServerMetrics::ConnectionTicket b = m.open_connection();
      EXPECT_EQ(value_of(parse_exposition(m.render(nullptr, false)), "deltaserve_open_connections"), 2);
    }
    EXPECT_EQ(value_of(parse_exposition(m.render(nullptr, true)), "deltaserve_open_connections"), 1);
  }
  EXPECT_EQ(m.num_open_connections(), 0);
  EXPECT_EQ(value_of(parse_exposition(m.render(nullptr, true)), "deltaserve_open_connections"), 0);
}

TEST(Metrics, GenerationRateSlidesOut) {
  ServerMetrics m({"tiny", false, 0.2, {}});
  m.on_step({1.0, 10, 1, 0, 40});
  EXPECT_NEAR(m.generation_rate(ServerMetrics::Clock::now()), 200.0, 1e-9);
  EXPECT_EQ(m.generation_rate(ServerMetrics::Clock::now() + std::chrono::seconds(1)), 0.0);
}

// --split replicas: the daemon-wide names are the sums, each engine has its labelled copy, the
// same local request id on two engines takes two stream slots, and routing decisions count.
TEST(ServerMetrics, ReplicasExportPerEngineSeriesBesideTheTotals) {
  ServerMetrics m({"tiny", true, 10.0, {"cpu:0", "cpu:1"}});
  scheduler::EngineObserver* e0 = m.engine_observer(0);
  scheduler::EngineObserver* e1 = m.engine_observer(1);
  ASSERT_NE(e0, e1);
  ASSERT_NE(e0, static_cast<scheduler::EngineObserver*>(&m));
  EngineLimits total = limits();
  total.max_streams = 8;
  const std::vector<EngineLimits> each{limits(), limits()};
  m.set_limits(total, each);
  e0->on_step({4.0, 12, 2, 8, 3});
  e1->on_step({4.0, 12, 2, 8, 5});
  e0->on_inter_token(1, 10.0);
  e1->on_inter_token(1, 20.0);  // the same local id on the other engine: another stream
  e1->on_request_finished({1, scheduler::FinishReason::Stop, 10, 5, 1.0, 20.0, 100.0, 50.0});
  m.on_route(0, RouteReason::kLoad);
  m.on_route(1, RouteReason::kPrefix);
  m.on_route(1, RouteReason::kPrefix);
  m.on_response_finished(ResponseEnd::Stop);
  scheduler::EngineStats a = stats(), b = stats();
  b.num_running = 1;
  b.prefix_cache_hits = 4;
  scheduler::EngineStats sum = a;
  sum.num_running = 3;
  sum.num_state_slots_total = 8;
  sum.prefix_cache_hits = 4;
  const std::vector<scheduler::EngineStats> per_engine{a, b};
  const Exposition ex = parse_exposition(m.render(&sum, true, per_engine));
  EXPECT_EQ(value_of(ex, "deltaserve_generation_tokens_total"), 8.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_generation_tokens_total", R"(engine="0")"), 3.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_generation_tokens_total", R"(engine="1")"), 5.0);
  EXPECT_EQ(value_of(ex, "deltaserve_requests_running"), 3.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_requests_running", R"(device="cpu:0",engine="0")"), 2.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_requests_running", R"(device="cpu:1",engine="1")"), 1.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_prefix_cache_hits_total", R"(engine="1")"), 4.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_requests_total", R"(engine="0")"), 0.0);
  EXPECT_EQ(value_of(ex, "deltaserve_engine_requests_total", R"(engine="1")"), 1.0);
  EXPECT_EQ(value_of(ex, "deltaserve_router_decisions_total", R"(engine="1",reason="prefix")"), 2.0);
  EXPECT_EQ(value_of(ex, "deltaserve_router_decisions_total", R"(engine="0",reason="load")"), 1.0);
  // Two streams took two slots (router ids): engine 1's ended and freed its own, engine 0's runs.
  int busy = 0;
  for (const Sample& s : ex.samples) busy += s.name == "deltaserve_stream_decode_tokens_per_second" && s.value > 0.0;
  EXPECT_EQ(busy, 1);
  EXPECT_EQ(value_of(ex, "deltaserve_stream_decode_tokens_per_second", R"(slot="0")"), 100.0);
  // vLLM's names per engine; responses on engine 0's.
  EXPECT_EQ(value_of(ex, "vllm:num_requests_running", R"(engine="1")"), 1.0);
  EXPECT_EQ(value_of(ex, "vllm:request_success_total", R"(engine="0",finished_reason="stop")"), 1.0);
}

}  // namespace
}  // namespace deltaserve::server
