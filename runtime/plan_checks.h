// Checks every backend runs on a plan before touching a cache. Plans come from our own
// scheduler, but a wrong one must fail loudly (std::invalid_argument naming the sequence),
// never write outside a cache. A backend adds its own bounds on top (the GPU backend's fixed
// rows per step, for one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/batch_plan.h"

namespace deltaserve::runtime {

// "batch plan: sequence <index>: <what>"
std::string plan_sequence_error(size_t index, const std::string& what);

// Token ids in [0, num_vocab); a block table that covers positions [first_position,
// first_position + tokens.size()) with block ids in the pool.
void check_plan_rows(size_t index, const std::vector<int32_t>& tokens, int64_t first_position,
                     const std::vector<int32_t>& kv_blocks, const CacheConfig& cache, int64_t num_vocab);

// Every sequence: a slot in range used once, rows present, output counts within its rows,
// verify rows within the state ring, and check_plan_rows.
void check_plan_sequences(const BatchPlan& plan, const CacheConfig& cache, int64_t num_vocab);

}  // namespace deltaserve::runtime
