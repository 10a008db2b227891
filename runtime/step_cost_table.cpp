#include "runtime/step_cost_table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace deltaserve::runtime {
namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "deltaserve-step-costs";
constexpr int kVersion = 1;

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("step cost table: " + message);
}

void require_grid(const std::vector<int32_t>& grid, const std::string& name) {
  for (size_t i = 0; i < grid.size(); ++i) {
    require(grid[i] >= 1, name + " values must be >= 1");
    require(i == 0 || grid[i] > grid[i - 1], name + " must be strictly ascending");
  }
}

void require_time(double ms) { require(std::isfinite(ms) && ms >= 0.0, "times must be finite and >= 0"); }

// Piecewise linear through (xs, ys): the first value below the grid, the last segment's slope
// (never negative) past it.
double interpolate(const std::vector<int32_t>& xs, const std::vector<double>& ys, double x) {
  if (xs.empty()) return 0.0;
  if (xs.size() == 1 || x <= xs.front()) return ys.front();
  const size_t n = xs.size();
  if (x >= xs.back()) {
    const double slope = std::max(0.0, (ys[n - 1] - ys[n - 2]) / static_cast<double>(xs[n - 1] - xs[n - 2]));
    return ys[n - 1] + slope * (x - xs[n - 1]);
  }
  const size_t hi = static_cast<size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const size_t lo = hi - 1;
  const double t = (x - xs[lo]) / static_cast<double>(xs[hi] - xs[lo]);
  return ys[lo] + t * (ys[hi] - ys[lo]);
}

}  // namespace

StepCostTable::StepCostTable(StepCostKey key, std::vector<int32_t> streams, std::vector<int32_t> rows_per_stream,
                             std::vector<std::vector<double>> trunk_ms, std::vector<int32_t> mtp_rows,
                             std::vector<double> mtp_ms)
    : key_(std::move(key)),
      streams_(std::move(streams)),
      rows_per_stream_(std::move(rows_per_stream)),
      trunk_ms_(std::move(trunk_ms)),
      mtp_rows_(std::move(mtp_rows)),
      mtp_ms_(std::move(mtp_ms)) {
  require(!streams_.empty() && !rows_per_stream_.empty(), "the streams and rows_per_stream grids must not be empty");
  require_grid(streams_, "streams");
  require_grid(rows_per_stream_, "rows_per_stream");
  require_grid(mtp_rows_, "mtp_rows");
  require(trunk_ms_.size() == streams_.size(), "trunk_ms needs one row per streams value");
  for (std::vector<double>& row : trunk_ms_) {
    require(row.size() == rows_per_stream_.size(), "every trunk_ms row needs one time per rows_per_stream value");
    for (const double ms : row) require_time(ms);
  }
  require(mtp_ms_.size() == mtp_rows_.size(), "mtp_ms needs one time per mtp_rows value");
  for (const double ms : mtp_ms_) require_time(ms);
  // More rows or more streams never cost less: timing noise must not read as a free row.
  for (size_t i = 0; i < trunk_ms_.size(); ++i) {
    for (size_t j = 0; j < trunk_ms_[i].size(); ++j) {
      if (j > 0) trunk_ms_[i][j] = std::max(trunk_ms_[i][j], trunk_ms_[i][j - 1]);
      if (i > 0) trunk_ms_[i][j] = std::max(trunk_ms_[i][j], trunk_ms_[i - 1][j]);
    }
  }
  for (size_t j = 1; j < mtp_ms_.size(); ++j) mtp_ms_[j] = std::max(mtp_ms_[j], mtp_ms_[j - 1]);
}

double StepCostTable::trunk_ms(double streams, double rows) const {
  if (empty() || streams <= 0.0) return 0.0;
  const double per_stream = std::max(1.0, rows / streams);
  std::vector<double> at_streams(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) at_streams[i] = interpolate(rows_per_stream_, trunk_ms_[i], per_stream);
  return interpolate(streams_, at_streams, streams);
}

double StepCostTable::mtp_ms(double rows) const {
  if (rows <= 0.0 || mtp_rows_.empty()) return 0.0;
  return interpolate(mtp_rows_, mtp_ms_, rows);
}

std::string StepCostTable::to_json() const {
  const json j = {{"format", kFormat},          {"version", kVersion},
                  {"device", key_.device},      {"model", key_.model},
                  {"streams", streams_},        {"rows_per_stream", rows_per_stream_},
                  {"trunk_ms", trunk_ms_},      {"mtp_rows", mtp_rows_},
                  {"mtp_ms", mtp_ms_}};
  return j.dump(1) + "\n";
}

StepCostTable StepCostTable::from_json(const std::string& text, const std::string& what) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(what + ": not a JSON object");
  if (j.value("format", std::string()) != kFormat)
    throw std::runtime_error(what + ": not a step cost table (\"format\" is not \"" + kFormat + "\")");
  if (j.value("version", 0) != kVersion)
    throw std::runtime_error(what + ": step cost table version " + j.value("version", json(0)).dump() + ", expected " +
                             std::to_string(kVersion));
  try {
    StepCostKey key{j.at("device").get<std::string>(), j.at("model").get<std::string>()};
    return StepCostTable(std::move(key), j.at("streams").get<std::vector<int32_t>>(),
                         j.at("rows_per_stream").get<std::vector<int32_t>>(),
                         j.at("trunk_ms").get<std::vector<std::vector<double>>>(), j.at("mtp_rows").get<std::vector<int32_t>>(),
                         j.at("mtp_ms").get<std::vector<double>>());
  } catch (const json::exception& e) {
    throw std::runtime_error(what + ": malformed step cost table: " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(what + ": " + e.what());
  }
}

void StepCostTable::save(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  out << to_json();
  out.flush();
  if (!out) throw std::runtime_error(path + ": cannot write the step cost table");
}

StepCostTable StepCostTable::load(const std::string& path, const StepCostKey& expected) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the step cost table");
  std::stringstream text;
  text << in.rdbuf();
  StepCostTable table = from_json(text.str(), path);
  if (!(table.key() == expected))
    throw std::runtime_error(path + ": measured for device '" + table.key().device + "' and model '" + table.key().model +
                             "', not device '" + expected.device + "' and model '" + expected.model + "'");
  return table;
}

}  // namespace deltaserve::runtime
