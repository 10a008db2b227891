// The bytes one forward must move at least (a lower bound, not a measurement), so that
// `deltaserve bench` can print achieved GB/s against a measured copy bandwidth. Pure
// arithmetic over the tensor sizes and the config; no I/O; any thread.
//
// A forward of n streams x r rows each, with c tokens already cached per stream, must
// - read every trunk tensor once (norms, projections, router, shared expert, LM head), except
//   the embedding table, of which only n*r rows are read (the whole table when the embeddings
//   are tied, as it is then also the LM head);
// - read, per MoE layer, the expected number of distinct routed experts that n*r rows with k
//   of E experts each touch (uniform routing): E * (1 - (1 - k/E)^(n*r)), times the bytes per
//   expert (gate + up + down stacks / E);
// - per attention layer, read K and V of n * (c + r) positions (f32, the backends' KV type):
//   n * (c + r) * nkv * head_dim * 4 bytes * 2;
// - per Gated DeltaNet layer, read and write each stream's recurrent state once:
//   n * (Hv * dk * dv * e + (Kc - 1) * Dc * 4) bytes * 2, e = 4 (f32) or 2 (bf16 delta state).
// Tensors of layers >= num_layers (the MTP block) are not counted: bench does not run it.
// A prefill of p prompt tokens per stream is the same formula with r = p (weights once per
// forward of the whole prompt, every prompt row routed, KV of context + prompt once).
#pragma once

#include <cstdint>

#include "runtime/backend.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

struct StepTraffic {
  double trunk_bytes = 0;      // non-expert weights read once (LM head included)
  double embedding_bytes = 0;  // rows of token_embd read (the whole table when tied)
  double expert_bytes = 0;     // expected distinct routed experts x bytes per expert
  double kv_bytes = 0;         // K and V of context + new rows
  double state_bytes = 0;      // recurrent state read + written
  double total() const { return trunk_bytes + embedding_bytes + expert_bytes + kv_bytes + state_bytes; }
};

// Expected distinct experts that num_rows rows with k of E experts each touch: E (1-(1-k/E)^rows).
double expected_distinct_experts(int64_t num_experts, int64_t num_experts_used, int64_t num_rows);

// The lower bound above for one forward (decode: r = rows per stream, c = cached tokens;
// prefill: r = prompt tokens). Arguments < 0 count as 0.
StepTraffic step_traffic(const LoadedModel& model, int64_t num_streams, int64_t rows_per_stream,
                         int64_t context_tokens, StatePrecision state_precision = StatePrecision::kF32);

// The arithmetic one forward must do (multiply-adds count 2), for bench's achieved FLOP/s:
// - products: 2 x the elements of every trunk matrix (tensors of more than one row, the LM
//   head included, the token embedding only when tied as the LM head) per row, routed expert
//   stacks scaled by k/E (each row runs k of E experts);
// - attention: per layer and stream, QK^T and PV over the positions each new row sees,
//   4 x n_heads x head_dim x sum_i (c + i + 1);
// - Gated DeltaNet: per layer and row the state's decay, k^T S, the rank-1 update and q^T S,
//   about 6 x Hv x dk x dv (the recurrent form's count; the chunked form does more).
// Norms, activations, the conv and the router's softmax are left out (well under 1%).
struct StepFlops {
  double product_flops = 0;
  double attention_flops = 0;
  double gdn_flops = 0;
  double total() const { return product_flops + attention_flops + gdn_flops; }
};
StepFlops step_flops(const LoadedModel& model, int64_t num_streams, int64_t rows_per_stream, int64_t context_tokens);

}  // namespace deltaserve::runtime
