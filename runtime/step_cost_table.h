// What a step costs on one device with one model: the wall time of a decode/verify forward for
// a grid of (streams, rows per stream), and of one MTP draft pass for a grid of rows. Measured at
// start-up (runtime/step_cost_probe.h) or read back from a cache file; the scheduler's draft
// policy (scheduler/draft_policy.h) predicts a step's time from it. Immutable once built.
//
// Units: milliseconds. Interpolation is piecewise linear: bilinear in (streams, rows per
// stream) inside the grid, linear extrapolation from the last segment past it (a prefill chunk
// is many rows of one stream), clamped to the first point below it. The measured values are
// made non-decreasing along both axes (running maximum) so noise never makes a row look free
// or negative.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltaserve::runtime {

// Identifies what a table was measured on: a cached table is used only where both match.
struct StepCostKey {
  std::string device;  // Backend::device_name() and its speed settings
  std::string model;   // the model file and its shapes
  bool operator==(const StepCostKey&) const = default;
};

class StepCostTable {
 public:
  StepCostTable() = default;
  // streams and rows_per_stream ascending, >= 1, at least one each; trunk_ms
  // [streams.size()][rows_per_stream.size()]; mtp_rows ascending (may be empty: no MTP head),
  // mtp_ms parallel to it. Throws std::invalid_argument on a malformed grid or a negative or
  // non-finite time.
  StepCostTable(StepCostKey key, std::vector<int32_t> streams, std::vector<int32_t> rows_per_stream,
                std::vector<std::vector<double>> trunk_ms, std::vector<int32_t> mtp_rows, std::vector<double> mtp_ms);

  // Predicted forward time of one step: `streams` sequences carrying `rows` rows in all
  // (rows >= streams). 0 when the table is empty.
  double trunk_ms(double streams, double rows) const;
  // Predicted time of one MTP pass over `rows` rows (one per sequence); 0 for rows <= 0 or
  // without an MTP grid.
  double mtp_ms(double rows) const;

  bool empty() const { return streams_.empty(); }
  const StepCostKey& key() const { return key_; }
  const std::vector<int32_t>& streams() const { return streams_; }
  const std::vector<int32_t>& rows_per_stream() const { return rows_per_stream_; }
  const std::vector<std::vector<double>>& trunk_grid_ms() const { return trunk_ms_; }
  const std::vector<int32_t>& mtp_rows() const { return mtp_rows_; }
  const std::vector<double>& mtp_grid_ms() const { return mtp_ms_; }

  // The cache file: JSON {"format": "deltaserve-step-costs", "version": 1, "device", "model",
  // "streams", "rows_per_stream", "trunk_ms", "mtp_rows", "mtp_ms"}.
  std::string to_json() const;
  // Throws std::runtime_error with a readable message ("<what>: ...") on anything malformed.
  static StepCostTable from_json(const std::string& text, const std::string& what);
  // Writes the file (throws std::runtime_error when it cannot).
  void save(const std::string& path) const;
  // Reads the file; throws std::runtime_error naming the file and the problem when it is
  // missing, unreadable or malformed, or was measured for another key.
  static StepCostTable load(const std::string& path, const StepCostKey& expected);

 private:
  StepCostKey key_;
  std::vector<int32_t> streams_;
  std::vector<int32_t> rows_per_stream_;
  std::vector<std::vector<double>> trunk_ms_;
  std::vector<int32_t> mtp_rows_;
  std::vector<double> mtp_ms_;
};

}  // namespace deltaserve::runtime
