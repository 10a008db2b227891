#include "runtime/plan_checks.h"

#include <stdexcept>

namespace deltaserve::runtime {

std::string plan_sequence_error(size_t index, const std::string& what) {
  return "batch plan: sequence " + std::to_string(index) + ": " + what;
}

void check_plan_rows(size_t index, const std::vector<int32_t>& tokens, int64_t first_position,
                     const std::vector<int32_t>& kv_blocks, const CacheConfig& cache, int64_t num_vocab) {
  for (int32_t t : tokens)
    if (t < 0 || t >= num_vocab) throw std::invalid_argument(plan_sequence_error(index, "token id out of range"));
  const int64_t end = first_position + static_cast<int64_t>(tokens.size());
  const int64_t blocks_needed = (end + cache.kv_block_tokens - 1) / cache.kv_block_tokens;
  if (static_cast<int64_t>(kv_blocks.size()) < blocks_needed)
    throw std::invalid_argument(plan_sequence_error(index, "block table too short for its positions"));
  for (int32_t b : kv_blocks)
    if (b < 0 || b >= cache.num_kv_blocks) throw std::invalid_argument(plan_sequence_error(index, "KV block id out of range"));
}

void check_plan_sequences(const BatchPlan& plan, const CacheConfig& cache, int64_t num_vocab) {
  std::vector<bool> slot_seen(static_cast<size_t>(cache.num_state_slots), false);
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const SequenceStep& s = plan.sequences[i];
    const auto fail = [i](const char* what) { throw std::invalid_argument(plan_sequence_error(i, what)); };
    if (s.slot < 0 || s.slot >= cache.num_state_slots) fail("slot out of range");
    if (slot_seen[static_cast<size_t>(s.slot)]) fail("slot used twice in one step");
    slot_seen[static_cast<size_t>(s.slot)] = true;
    if (s.tokens.empty()) fail("no tokens");
    if (s.num_cached_tokens < 0) fail("negative num_cached_tokens");
    const int32_t rows = static_cast<int32_t>(s.tokens.size());
    if (s.num_logits < 0 || s.num_logits > rows || s.num_hidden < 0 || s.num_hidden > rows)
      fail("num_logits or num_hidden out of range");
    if (!s.draws.empty() && static_cast<int32_t>(s.draws.size()) != s.num_logits) fail("draws must be one per logit row");
    if (s.keep_row_states && (cache.max_verify_rows < 2 || rows > cache.max_verify_rows))
      fail("more verify rows than the state ring holds");
    check_plan_rows(i, s.tokens, s.num_cached_tokens, s.kv_blocks, cache, num_vocab);
  }
}

}  // namespace deltaserve::runtime
