#include "runtime/step_traffic.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace deltaserve::runtime {
namespace {

// The N of "blk.N.<...>", or -1 for a tensor outside the blocks (token_embd, output, ...).
int64_t block_index(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t index = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && index < kMaxModelLayers; ++i)
    index = index * 10 + (name[i] - '0');
  return i == 4 ? -1 : index;
}

}  // namespace

double expected_distinct_experts(int64_t num_experts, int64_t num_experts_used, int64_t num_rows) {
  if (num_experts <= 0 || num_experts_used <= 0 || num_rows <= 0) return 0;
  const double e = static_cast<double>(num_experts);
  const double miss = 1.0 - std::min(1.0, static_cast<double>(num_experts_used) / e);
  return e * (1.0 - std::pow(miss, static_cast<double>(num_rows)));
}

StepTraffic step_traffic(const LoadedModel& model, int64_t num_streams, int64_t rows_per_stream,
                         int64_t context_tokens, StatePrecision state_precision) {
  const ModelConfig& c = model.config;
  const double n = static_cast<double>(std::max<int64_t>(num_streams, 0));
  const int64_t num_rows = std::max<int64_t>(num_streams, 0) * std::max<int64_t>(rows_per_stream, 0);
  const double positions = static_cast<double>(std::max<int64_t>(context_tokens, 0) + std::max<int64_t>(rows_per_stream, 0));
  // Fraction of each routed-expert stack read: distinct experts / E.
  const double expert_fraction =
      c.num_experts > 0 ? expected_distinct_experts(c.num_experts, c.num_experts_used, num_rows) / c.num_experts : 0;
  const bool tied = model.tensors.find("output.weight") == model.tensors.end();

  StepTraffic t;
  for (const auto& [name, view] : model.tensors) {
    const double bytes = static_cast<double>(view.num_bytes);
    if (block_index(name) >= c.num_layers) continue;  // the MTP block
    if (name == "token_embd.weight") {
      const int64_t rows = std::min<int64_t>(num_rows, view.num_rows());
      t.embedding_bytes += tied ? bytes : static_cast<double>(rows) * static_cast<double>(view.row_bytes());
    } else if (name.find("_exps") != std::string::npos) {
      t.expert_bytes += bytes * expert_fraction;
    } else {
      t.trunk_bytes += bytes;
    }
  }
  const double kv_per_position = static_cast<double>(c.num_kv_heads * c.head_dim) * 4.0 * 2.0;
  t.kv_bytes = static_cast<double>(c.num_attention_layers()) * n * positions * kv_per_position;
  const double delta_elem_bytes = state_precision == StatePrecision::kBf16 ? 2.0 : 4.0;
  const double state_per_stream =
      static_cast<double>(c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim) * delta_elem_bytes +
      static_cast<double>((c.conv_kernel - 1) * c.conv_channels()) * 4.0;
  t.state_bytes = static_cast<double>(c.num_gdn_layers()) * n * state_per_stream * 2.0;
  return t;
}

StepFlops step_flops(const LoadedModel& model, int64_t num_streams, int64_t rows_per_stream, int64_t context_tokens) {
  const ModelConfig& c = model.config;
  const double n = static_cast<double>(std::max<int64_t>(num_streams, 0));
  const double r = static_cast<double>(std::max<int64_t>(rows_per_stream, 0));
  const double ctx = static_cast<double>(std::max<int64_t>(context_tokens, 0));
  const bool tied = model.tensors.find("output.weight") == model.tensors.end();
  const double expert_share =
      c.num_experts > 0 ? static_cast<double>(c.num_experts_used) / static_cast<double>(c.num_experts) : 0;
  double elements_per_row = 0;
  for (const auto& [name, view] : model.tensors) {
    if (block_index(name) >= c.num_layers || view.num_rows() <= 1) continue;  // the MTP block; vectors
    if (name == "token_embd.weight" && !tied) continue;                       // a lookup, not a product
    const double elements = static_cast<double>(view.num_elements());
    elements_per_row += name.find("_exps") != std::string::npos ? elements * expert_share : elements;
  }
  StepFlops f;
  f.product_flops = 2.0 * elements_per_row * n * r;
  const double positions_seen = r * ctx + r * (r + 1) / 2;  // sum over the new rows of c + i + 1
  f.attention_flops = static_cast<double>(c.num_attention_layers()) * n * 4.0 *
                      static_cast<double>(c.num_heads * c.head_dim) * positions_seen;
  f.gdn_flops = static_cast<double>(c.num_gdn_layers()) * n * r * 6.0 *
                static_cast<double>(c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim);
  return f;
}

}  // namespace deltaserve::runtime
