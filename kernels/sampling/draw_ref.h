// The sampling rule on the host: the reference the device draw (draw_gpu.h) is checked against,
// and the host sampler's distribution (runtime/sampler.h) for rows with bias, penalties or a
// constraint. Masses per draw_rule.h, then in order:
//   1. top = the row's argmax (the greedy rule: lowest id on ties, NaN never wins); a top that
//      is not finite keeps only itself (mass 1);
//   2. every token's mass (0: dropped: -inf, NaN, min-p, under 2^-40 of the top);
//   3. top-k: the top_k first tokens of likelihood order with mass > 0;
//   4. top-p: the shortest prefix of likelihood order among those left whose mass reaches
//      top_p_target(their total, top_p);
//   5. the draw: the first id, in id order, whose running mass exceeds
//      draw_target(kept total, word).
// Steps 3 and 4 each keep a prefix of likelihood order, found by a radix select over the
// 64-bit likelihood keys (a histogram of one 8-bit digit a pass), never a sort of the row.
//
// Pure functions; any thread; a pool only splits step 2's pass. C++17 (the GPU tests include it).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/parallel.h"
#include "kernels/sampling/draw_rule.h"

namespace deltaserve::kernels {

// What one draw samples from: the integer masses of every token (0 where dropped) and their
// exact total (> 0 for any non-empty row).
struct DrawMasses {
  std::vector<uint64_t> mass;
  uint64_t total = 0;
  double probability(int32_t id) const {
    return static_cast<double>(mass[static_cast<size_t>(id)]) / static_cast<double>(total);
  }
  bool empty() const { return mass.empty(); }
};

// Steps 1-4 (params.word unused). Throws std::invalid_argument for an empty row or a
// vocabulary past draw::kMaxVocab.
DrawMasses draw_masses(const float* logits, int64_t vocab, const DrawParams& params, const ParallelFor* pool = nullptr);
// Step 5 over any masses (an empty total draws 0).
int32_t draw_from(const DrawMasses& masses, uint32_t word);
// Steps 1-5: the token the device draw gives for this row.
int32_t draw_ref(const float* logits, int64_t vocab, const DrawParams& params);

// The greedy rule (lowest id of the largest value; NaN never wins; no non-NaN value: 0).
int32_t argmax_ref(const float* row, int64_t vocab);

// The smallest key k of `items` (key, weight) such that the weights of keys <= k reach
// `target` (> 0); the largest key when they never do. Keys distinct. Exposed for the tests.
uint64_t select_prefix_key(std::vector<std::pair<uint64_t, uint64_t>> items, uint64_t target);

}  // namespace deltaserve::kernels
