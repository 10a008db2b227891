// The step cost table (runtime/step_cost_table.h): interpolation and extrapolation, the cleaning
// of noisy grids, the cache file (round trip, wrong key, malformed files with readable errors),
// and the probe on the CPU backend with the embedded model (runtime/step_cost_probe.h): a
// bounded measurement, a cache that is read back, and a bad cache that is measured again.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/step_cost_probe.h"
#include "runtime/step_cost_table.h"

namespace deltaserve::runtime {
namespace {

const StepCostKey kKey{"cpu", "tiny"};

// 1 and 4 streams, 1..3 rows each; MTP passes over 1 and 4 rows.
StepCostTable small_table() {
  return StepCostTable(kKey, {1, 4}, {1, 2, 3}, {{10, 12, 14}, {16, 24, 32}}, {1, 4}, {1.0, 2.5});
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("deltaserve_" + name + "_" + std::to_string(::getpid()) + ".json")).string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST(StepCostTableTest, InterpolatesInsideTheGrid) {
  const StepCostTable t = small_table();
  EXPECT_DOUBLE_EQ(t.trunk_ms(1, 1), 10);
  EXPECT_DOUBLE_EQ(t.trunk_ms(1, 3), 14);
  EXPECT_DOUBLE_EQ(t.trunk_ms(4, 8), 24);     // 4 streams x 2 rows
  EXPECT_DOUBLE_EQ(t.trunk_ms(1, 1.5), 11);   // half way between 1 and 2 rows
  EXPECT_DOUBLE_EQ(t.trunk_ms(4, 6), 20);     // 1.5 rows per stream
  // 2 streams at 1 row: a third of the way from 1 to 4 streams.
  EXPECT_DOUBLE_EQ(t.trunk_ms(2, 2), 12);
  // 2 streams at 2 rows each: 12 + (24 - 12) / 3.
  EXPECT_DOUBLE_EQ(t.trunk_ms(2, 4), 16);
  EXPECT_DOUBLE_EQ(t.mtp_ms(1), 1.0);
  EXPECT_DOUBLE_EQ(t.mtp_ms(2), 1.5);
  EXPECT_DOUBLE_EQ(t.mtp_ms(0), 0.0);
}

TEST(StepCostTableTest, ExtrapolatesPastTheGridAndClampsBelowIt) {
  const StepCostTable t = small_table();
  EXPECT_DOUBLE_EQ(t.trunk_ms(1, 5), 18);   // the last segment's slope: 2 ms per row
  EXPECT_DOUBLE_EQ(t.trunk_ms(8, 8), 24);   // 1 row each: 16 + (16 - 10) / 3 per stream x 4 streams
  EXPECT_DOUBLE_EQ(t.trunk_ms(1, 0.5), 10);  // fewer rows than streams: the first point
  EXPECT_DOUBLE_EQ(t.mtp_ms(8), 4.5);
}

TEST(StepCostTableTest, NoisyGridsNeverMakeRowsCheaper) {
  // 2 rows measured faster than 1, 4 streams faster than 1: both raised to the running maximum.
  const StepCostTable t(kKey, {1, 4}, {1, 2}, {{10, 9}, {8, 20}}, {}, {});
  EXPECT_DOUBLE_EQ(t.trunk_grid_ms()[0][1], 10);
  EXPECT_DOUBLE_EQ(t.trunk_grid_ms()[1][0], 10);
  EXPECT_GE(t.trunk_ms(1, 2), t.trunk_ms(1, 1));
  EXPECT_DOUBLE_EQ(t.mtp_ms(4), 0.0);  // no MTP grid
}

TEST(StepCostTableTest, RefusesMalformedGrids) {
  EXPECT_THROW(StepCostTable(kKey, {}, {1}, {}, {}, {}), std::invalid_argument);
  EXPECT_THROW(StepCostTable(kKey, {2, 1}, {1}, {{1}, {1}}, {}, {}), std::invalid_argument);
  EXPECT_THROW(StepCostTable(kKey, {1}, {1, 2}, {{1}}, {}, {}), std::invalid_argument);
  EXPECT_THROW(StepCostTable(kKey, {1}, {1}, {{-1}}, {}, {}), std::invalid_argument);
  EXPECT_THROW(StepCostTable(kKey, {1}, {1}, {{1}}, {1, 2}, {1}), std::invalid_argument);
}

TEST(StepCostTableTest, CacheFileRoundTrips) {
  const std::string path = temp_path("roundtrip");
  const StepCostTable t = small_table();
  t.save(path);
  const StepCostTable back = StepCostTable::load(path, kKey);
  EXPECT_EQ(back.streams(), t.streams());
  EXPECT_EQ(back.rows_per_stream(), t.rows_per_stream());
  EXPECT_EQ(back.trunk_grid_ms(), t.trunk_grid_ms());
  EXPECT_EQ(back.mtp_rows(), t.mtp_rows());
  EXPECT_EQ(back.mtp_grid_ms(), t.mtp_grid_ms());
  EXPECT_DOUBLE_EQ(back.trunk_ms(2, 5), t.trunk_ms(2, 5));
  std::filesystem::remove(path);
}

// Every bad file fails with a message that names the file and says what is wrong.
TEST(StepCostTableTest, BadCacheFilesGiveReadableErrors) {
  const std::string path = temp_path("bad");
  auto error_of = [&](const std::string& text, const StepCostKey& key = kKey) -> std::string {
    write_file(path, text);
    try {
      StepCostTable::load(path, key);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of("{not json").find(path + ": not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "other"})").find("not a step cost table"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "deltaserve-step-costs", "version": 7})").find("version 7"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "deltaserve-step-costs", "version": 1, "device": "cpu", "model": "tiny"})")
                .find("malformed step cost table"),
            std::string::npos);
  std::string table = small_table().to_json();
  EXPECT_NE(error_of(table, StepCostKey{"cuda: NVIDIA H200", "tiny"}).find("measured for device 'cpu'"), std::string::npos);
  const size_t at = table.find("\"trunk_ms\"");
  table.replace(at, 10, "\"trunk_xx\"");
  EXPECT_NE(error_of(table).find("malformed"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "deltaserve-step-costs", "version": 1, "device": "cpu", "model": "tiny",
      "streams": [1], "rows_per_stream": [1, 2], "trunk_ms": [[1]], "mtp_rows": [], "mtp_ms": []})")
                .find("every trunk_ms row"),
            std::string::npos);
  std::filesystem::remove(path);
  try {
    StepCostTable::load(path, kKey);
    FAIL() << "a missing file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read"), std::string::npos) << e.what();
  }
}

class StepCostProbeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model("models/deltaserve-tiny-moe.gguf").release(); }
  static void TearDownTestSuite() { delete model_; }
  static inline LoadedModel* model_ = nullptr;
};

TEST_F(StepCostProbeTest, MeasuresTheGridWithinItsBudget) {
  CpuBackend backend(*model_, CacheConfig{8, 16, 64, 4}, 2);
  StepCostProbeOptions o;
  o.max_streams = 8;
  o.max_rows_per_stream = 4;
  o.mtp = true;
  o.budget_ms = 1500;
  const auto t0 = std::chrono::steady_clock::now();
  const StepCostTable t = measure_step_costs(backend, o, step_cost_key(backend, "tiny"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0);  // the budget plus one grid row, on a loaded machine
  EXPECT_EQ(t.rows_per_stream(), (std::vector<int32_t>{1, 2, 3, 4}));
  ASSERT_FALSE(t.streams().empty());
  EXPECT_EQ(t.streams().front(), 1);
  EXPECT_EQ(t.mtp_rows(), t.streams());
  // On the CPU a row is real compute: 8 rows cost more than 1.
  EXPECT_GT(t.trunk_ms(1, 1), 0.0);
  EXPECT_GT(t.trunk_ms(t.streams().back(), 4.0 * t.streams().back()), t.trunk_ms(1, 1));
  EXPECT_EQ(step_cost_stream_grid(backend, o), (std::vector<int32_t>{1, 2, 4, 8}));
}

TEST_F(StepCostProbeTest, GridStaysWithinSlotsBlocksAndStepRows) {
  CpuBackend backend(*model_, CacheConfig{12, 16, 1000, 4}, 2);
  StepCostProbeOptions o;
  o.max_streams = 64;  // more than the slots
  o.max_rows_per_stream = 4;
  EXPECT_EQ(step_cost_stream_grid(backend, o), (std::vector<int32_t>{1, 2, 4, 8, 12}));
  o.max_step_rows = 20;  // 5 streams of 4 rows
  EXPECT_EQ(step_cost_stream_grid(backend, o), (std::vector<int32_t>{1, 2, 4, 5}));
}

TEST_F(StepCostProbeTest, CacheIsReadBackAndABadOneIsMeasuredAgain) {
  CpuBackend backend(*model_, CacheConfig{4, 16, 64, 3}, 2);
  StepCostProbeOptions o;
  o.max_streams = 4;
  o.max_rows_per_stream = 3;
  o.mtp = true;
  o.repetitions = 1;
  const StepCostKey key = step_cost_key(backend, "models/deltaserve-tiny-moe.gguf");
  const std::string path = temp_path("probe");
  std::filesystem::remove(path);
  std::vector<std::string> problems;
  bool from_cache = true;
  const StepCostTable measured = load_or_measure_step_costs(backend, o, key, path, problems, &from_cache);
  EXPECT_FALSE(from_cache);
  EXPECT_TRUE(problems.empty()) << problems.front();  // a missing file is no problem
  ASSERT_TRUE(std::filesystem::exists(path));
  const StepCostTable cached = load_or_measure_step_costs(backend, o, key, path, problems, &from_cache);
  EXPECT_TRUE(from_cache);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(cached.trunk_grid_ms(), measured.trunk_grid_ms());
  // Another model's table: reported, measured again, rewritten for this key.
  const StepCostKey other{key.device, "another model"};
  load_or_measure_step_costs(backend, o, other, path, problems, &from_cache);
  EXPECT_FALSE(from_cache);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("measured for device"), std::string::npos) << problems[0];
  EXPECT_NO_THROW(StepCostTable::load(path, other));
  // A truncated file: reported with the file's name, measured again.
  problems.clear();
  write_file(path, "{\"format\": \"deltaserve-step-co");
  const StepCostTable again = load_or_measure_step_costs(backend, o, key, path, problems, &from_cache);
  EXPECT_FALSE(from_cache);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(path + ": not a JSON object; measured again"), std::string::npos) << problems[0];
  EXPECT_FALSE(again.empty());
  EXPECT_NO_THROW(StepCostTable::load(path, key));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace deltaserve::runtime
