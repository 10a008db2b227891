// The gated delta rule, recurrent (token-loop) form, over one sequence's rows
// (MODEL.md 2.5 step 7). Per value head j with state S_j [dk][dv] (key index outer):
//   S <- exp(g_t) S;  e = S^T k;  delta = beta_t (v - e);  S <- S + k delta^T;  o = S^T q
// q and k are already L2-normalised, and q carries the dk^-1/2 scale. Value head j reads
// key head (j mod num_k_heads): the GGUF tiled head order.
#pragma once

#include <cstdint>

#include "kernels/parallel.h"

namespace deltaserve::kernels {

struct GatedDeltaRuleArgs {
  const float* q;     // [num_tokens][qk_stride], key head h at h * head_dim_k
  const float* k;     // [num_tokens][qk_stride]
  int64_t qk_stride;
  const float* v;     // [num_tokens][v_stride], value head j at j * head_dim_v
  int64_t v_stride;
  const float* g;     // [num_tokens][num_v_heads]: log decay (< 0)
  const float* beta;  // [num_tokens][num_v_heads]
  float* out;         // [num_tokens][out_stride], value head j at j * head_dim_v
  int64_t out_stride;
  float* state;       // [num_v_heads][head_dim_k][head_dim_v], updated in place
  int64_t num_tokens;
  int64_t num_k_heads;
  int64_t num_v_heads;
  int64_t head_dim_k;
  int64_t head_dim_v;
  // Optional: the state after each row, [num_tokens][num_v_heads][dk][dv] (verify rows).
  // Recurrent form only.
  float* state_after_row = nullptr;
  // Position of row 0 in its sequence. The chunked form cuts chunks at multiples of
  // kGdnChunkRows counted from the sequence's start, so its bits do not depend on where a
  // caller splits the rows when every split falls on such a multiple; the recurrent form
  // ignores it.
  int64_t first_position = 0;
};
void gated_delta_rule_ref(const GatedDeltaRuleArgs& args, const ParallelFor& pf);

// Chunked (WY) form, MODEL.md 3: the recurrent form's outputs and final state to f32 rounding
// of a different summation order, not bitwise (see gated_delta_rule_chunked.cpp for the error
// bound the tests hold it to). Per value head and chunk of up to kGdnChunkRows rows: the
// decay-masked, beta-scaled K K^T solved by forward substitution into U and W, then
// D = U - W S, O = (e^Gamma Q) S + P D, S = e^Gamma_C S + (e^(Gamma_C - Gamma) K)^T D.
// Preconditions: state_after_row null (verify rows stay recurrent); first_position >= 0.
inline constexpr int64_t kGdnChunkRows = 64;
void gated_delta_rule_chunked(const GatedDeltaRuleArgs& args, const ParallelFor& pf);

}  // namespace deltaserve::kernels
