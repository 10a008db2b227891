#include "scheduler/scheduler_config.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace deltaserve::scheduler {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("scheduler config: " + message);
}

}  // namespace

SchedulerConfig resolve_config(const SchedulerConfig& requested, const runtime::RunnerLimits& limits) {
  const runtime::CacheConfig& cache = limits.cache;
  require(cache.num_state_slots >= 1, "runner has no state slots");
  require(cache.kv_block_tokens >= 1, "runner kv_block_tokens must be >= 1");
  require(cache.num_kv_blocks >= 1, "runner has no KV blocks");
  require(limits.max_context_tokens >= 0, "runner max_context_tokens must be >= 0");
  require(limits.max_draft_depth >= 0, "runner max_draft_depth must be >= 0");

  SchedulerConfig c = requested;
  if (c.max_num_seqs == 0) c.max_num_seqs = cache.num_state_slots;
  require(c.max_num_seqs >= 1 && c.max_num_seqs <= cache.num_state_slots,
          "max_num_seqs " + std::to_string(c.max_num_seqs) + " must be in [1, " +
              std::to_string(cache.num_state_slots) + " state slots]");
  require(c.max_num_batched_tokens >= c.max_num_seqs,
          "max_num_batched_tokens " + std::to_string(c.max_num_batched_tokens) +
              " must be >= max_num_seqs " + std::to_string(c.max_num_seqs) +
              " (each running sequence needs its decode row every step)");
  require(c.max_prefill_chunk_tokens >= 1, "max_prefill_chunk_tokens must be >= 1");
  c.max_prefill_chunk_tokens = std::min(c.max_prefill_chunk_tokens, c.max_num_batched_tokens);
  require(c.max_num_waiting >= 1, "max_num_waiting must be >= 1");
  if (c.max_draft_depth < 0) c.max_draft_depth = limits.max_draft_depth;
  require(c.max_draft_depth <= limits.max_draft_depth,
          "max_draft_depth " + std::to_string(c.max_draft_depth) + " exceeds what the runner verifies (" +
              std::to_string(limits.max_draft_depth) + ")");
  require(c.max_draft_depth <= runtime::kMaxDraftDepth, "max_draft_depth must be <= " + std::to_string(runtime::kMaxDraftDepth));
  require(c.draft_min_expected >= 0.0 && c.draft_min_expected <= 1.0, "draft_min_expected must be in [0, 1]");
  require(c.draft_acceptance_prior >= 0.0 && c.draft_acceptance_prior <= 1.0, "draft_acceptance_prior must be in [0, 1]");

  const int64_t pool_tokens = int64_t{cache.num_kv_blocks} * cache.kv_block_tokens;
  int64_t window = pool_tokens;
  if (limits.max_context_tokens > 0) window = std::min<int64_t>(window, limits.max_context_tokens);
  if (c.max_context_tokens == 0) {
    c.max_context_tokens = static_cast<int32_t>(std::min<int64_t>(window, INT32_MAX));
  }
  require(c.max_context_tokens >= 2, "max_context_tokens must be >= 2");
  require(limits.max_context_tokens == 0 || c.max_context_tokens <= limits.max_context_tokens,
          "max_context_tokens " + std::to_string(c.max_context_tokens) +
              " exceeds the model's window " + std::to_string(limits.max_context_tokens));
  require(c.max_context_tokens <= pool_tokens,
          "max_context_tokens " + std::to_string(c.max_context_tokens) + " exceeds the KV pool (" +
              std::to_string(cache.num_kv_blocks) + " blocks x " +
              std::to_string(cache.kv_block_tokens) + " tokens): one sequence alone must fit");
  require(c.prefix_cache_device_bytes >= 0 && c.prefix_cache_host_bytes >= 0, "prefix cache budgets must be >= 0");
  require(c.prefix_checkpoint_tokens >= 0, "prefix_checkpoint_tokens must be >= 0");
  c.prefix_device_checkpoints = c.prefix_host_checkpoints = 0;
  if (c.prefix_cache && limits.checkpoint_bytes > 0) {
    // Capped so that a tiny model's checkpoints do not number in the millions.
    constexpr int64_t kMaxCheckpoints = int64_t{1} << 16;
    c.prefix_device_checkpoints = static_cast<int32_t>(std::min(kMaxCheckpoints, c.prefix_cache_device_bytes / limits.checkpoint_bytes));
    c.prefix_host_checkpoints = static_cast<int32_t>(std::min(kMaxCheckpoints, c.prefix_cache_host_bytes / limits.checkpoint_bytes));
  }
  if (c.prefix_device_checkpoints == 0 && c.prefix_host_checkpoints == 0) c.prefix_cache = false;
  const int32_t align = std::max(1, limits.prefill_chunk_align);
  c.prefix_checkpoint_tokens = (c.prefix_checkpoint_tokens + align - 1) / align * align;
  return c;
}

}  // namespace deltaserve::scheduler
