// Paged gated attention for decode and verify rows on the GPU (attention.h's math, over all
// rows of a step in one call): row r of sequence row_seq[r] attends causally to positions
// [0, positions[r]] through its sequence's block table, query head h reads KV head
// h / (num_heads / num_kv_heads) (GQA), softmax in f32, output times sigmoid(gate).
//
// Split-K (flash-decoding): a row with n = positions[r] + 1 keys is cut into tiles of
// kAttentionTileTokens keys, and consecutive tiles into at most kAttentionMaxChunks chunks of
// 2^j tiles each (the smallest power of two that fits; attention_chunk_tiles). One block per
// (chunk, KV head, row) loads each of its tiles' K and V rows once for the whole query-head
// group, keeps an online softmax over its tiles and leaves (max, sum, unnormalised output) in
// the workspace; the chunks of each (row, head) are then combined in chunk order. The split
// depends only on the row's own position, never on the batch: batch-invariant.
//
// Head split: a (chunk, KV head, row) may be served by `splits` blocks, each for group / splits
// of the KV head's query heads (each loads the chunk's K and V; the second from L2). A head's
// operations are the same whichever block runs them, so the split never changes a bit and may
// follow the load: a short grid takes more blocks (a one-stream step at 1,025 keys has 17
// chunks x 2 KV heads for 132 SMs: two blocks a pair; four, past one wave of these
// one-block-an-SM kernels, measured slower, and so did any split of 8,192+ keys' 64 chunks); a full grid takes one block per KV head, so K and V cross from L2 once.
// paged_attention_head_splits: head_splits when set (a divisor of the group), else the
// largest divisor s of the group with (chunks for max_keys) * num_kv_heads * num_rows * s <=
// kAttentionSplitMaxBlocks.
//
// Combine, two forms with the same f32 operations in the same order (bit-identical outputs):
//   sync_counters set (ONE launch): the last chunk block of a (row, KV head, split) to finish
//     (an arrival counter each) combines its heads and resets the counter to 0, so the next
//     launch and graph replays find zeros. sync_counters: num_rows * num_kv_heads * splits
//     entries used, at most num_rows * num_heads (size it so): zero before the call (e.g.
//     zero-filled once), left zero after it. Concurrent calls must not share counters (same
//     stream: fine).
//   sync_counters null (two launches): a separate combine kernel, one block per (head, row).
//
// Shapes: head_dim a multiple of 4 and at most 256 (64/128/256 in practice); num_heads /
// num_kv_heads at most 16; q, gate, caches 16-byte aligned, strides multiples of 4.
// max_keys: a host-side bound >= positions[r] + 1 for every row (sizes the grid and the
// workspace; chunks past a row's split exit at once and are not counted: every block derives
// the row's chunk count from positions[r] alone). sync_counters 4-byte aligned; head_splits 0
// or a divisor of num_heads / num_kv_heads. Otherwise gpuErrorInvalidValue, nothing launched.
//
// Calling thread: any; enqueues on `stream`; no allocation (the caller owns the workspace).
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

inline constexpr int64_t kAttentionTileTokens = 64;
inline constexpr int64_t kAttentionMaxChunks = 64;
// Grid blocks (chunks for max_keys x KV heads x rows x splits) the automatic head split may
// reach (see above).
inline constexpr int64_t kAttentionSplitMaxBlocks = 128;
// Rows x KV heads from which the V loads go out after the scores (value_loads below).
inline constexpr int64_t kAttentionLateValueUnits = 16;
// Deprecated: the split of the first version (fixed 256-key chunks); no kernel uses it now.
inline constexpr int64_t kAttentionChunkTokens = 256;

// Tiles per chunk for a row with num_keys keys: the smallest power of two p with
// p * kAttentionMaxChunks >= ceil(num_keys / kAttentionTileTokens).
inline int64_t attention_chunk_tiles(int64_t num_keys) {
  const int64_t tiles = (num_keys + kAttentionTileTokens - 1) / kAttentionTileTokens;
  int64_t per_chunk = 1;
  while (per_chunk * kAttentionMaxChunks < tiles) per_chunk *= 2;
  return per_chunk;
}

struct PagedAttentionGpuArgs {
  const float* q;            // [num_rows][q_stride], head h at h * q_head_stride
  const float* gate;         // like q
  int64_t q_stride;
  int64_t q_head_stride;
  float* out;                // [num_rows][out_stride], head h at h * head_dim
  int64_t out_stride;
  const float* k_cache;      // [num_blocks][block_tokens][num_kv_heads][head_dim]
  const float* v_cache;      // same layout
  const int32_t* block_tables;    // [num_seqs][block_table_stride]
  int64_t block_table_stride;
  const int32_t* row_seq;    // [num_rows]: the sequence of each row
  const int32_t* positions;  // [num_rows]
  int64_t block_tokens;
  int64_t num_rows;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t max_keys;
  float scale;               // 1 / sqrt(head_dim)
  float* workspace;          // paged_attention_workspace_floats(args) floats
  uint32_t* sync_counters = nullptr;  // num_rows * num_heads entries, zero between calls; null: 2 launches
  int64_t head_splits = 0;            // 0: paged_attention_head_splits' choice; else a divisor of the group
  // A tile's V loads: 1 with its K loads (one round trip a tile, one block an SM), 2 after its
  // scores (two blocks an SM, a second round trip a tile); 0: 2 from num_rows * num_kv_heads >=
  // kAttentionLateValueUnits, else 1. The same operations either way (same bits).
  int64_t value_loads = 0;
};

// Blocks per (chunk, KV head, row) for these args (see "Head split" above).
int64_t paged_attention_head_splits(const PagedAttentionGpuArgs& args);

// Kernel launches paged_attention_gpu makes for these args (a non-empty call): 1 with
// sync_counters, else 2.
inline int paged_attention_launches(const PagedAttentionGpuArgs& args) { return args.sync_counters != nullptr ? 1 : 2; }

int64_t paged_attention_workspace_floats(const PagedAttentionGpuArgs& args);
gpuError_t paged_attention_gpu(const PagedAttentionGpuArgs& args, gpuStream_t stream);

// Causal attention for prefill chunks (attention.h's math, same q/gate/out/cache layouts as
// above): the rows of sequence s are [seq_row_begin[s], seq_row_begin[s + 1]), contiguous and
// at consecutive positions seq_first_position[s], +1, ...; each attends to the cache
// positions [0, its own position] (the chunk's own K/V must already be appended, e.g. by
// kv_append_gpu). A block serves consecutive rows of a sequence for one KV head (G = num_heads
// / num_kv_heads query heads each); no split and no workspace. Each row keeps its own online
// softmax over key tiles from position 0 (tiles past its own position add exact zeros), so a
// row's result depends only on its position and its sequence's cache: batch-invariant. It is not bit-identical to
// paged_attention_gpu (that one splits long contexts into chunks), so a backend that needs
// prefill and decode bits to agree uses one of the two for both.
// max_rows_per_seq: a host-side bound on any sequence's rows (sizes the grid).
// Preconditions (else gpuErrorInvalidValue): as paged_attention_gpu; num_seqs <= 65535.
// Two forms, each batch-invariant in the same sense, with different last bits:
//   tensor cores (the default where the device allows: CUDA with bf16 mma and the shared
//     memory of sm_90, head_dim 128 or 256; prefill_attention_mma.cu): flash attention, 64
//     virtual rows (rows x query heads of the group) a block, so each K/V row is read once per
//     64 query vectors; Q K^T and P V as split-bf16 mma (three products each, f32-like
//     accuracy), online softmax in f32 over 32- or 64-key tiles from position 0.
//   CUDA cores (the rest: HIP, older devices, other head dims; or tensor_cores = false): 16 /
//     G rows a block (each K/V row read once per 16 query vectors), FMA over 64-key tiles.
struct PrefillAttentionGpuArgs {
  const float* q;            // [rows][q_stride], head h at h * q_head_stride
  const float* gate;         // like q
  int64_t q_stride;
  int64_t q_head_stride;
  float* out;                // [rows][out_stride], head h at h * head_dim
  int64_t out_stride;
  const float* k_cache;      // [num_blocks][block_tokens][num_kv_heads][head_dim]
  const float* v_cache;
  const int32_t* block_tables;  // [num_seqs][block_table_stride]
  int64_t block_table_stride;
  const int32_t* seq_row_begin;       // [num_seqs + 1]
  const int32_t* seq_first_position;  // [num_seqs]
  int64_t num_seqs;
  int64_t max_rows_per_seq;
  int64_t block_tokens;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  float scale;
  // false: the CUDA-core form even where the tensor-core one would serve (the parity tests
  // check both against the reference).
  bool tensor_cores = true;
};
gpuError_t prefill_attention_gpu(const PrefillAttentionGpuArgs& args, gpuStream_t stream);
// Whether prefill_attention_gpu takes the tensor-core form for these (valid) args on the current
// device (tests and benchmarks name the form they measured).
bool prefill_attention_uses_tensor_cores(const PrefillAttentionGpuArgs& args);

// Appends each row's K and V ([num_rows][kv_stride], num_kv_heads * head_dim floats used) at
// its position in its sequence's pages. Rows must have distinct (sequence, position).
struct KvAppendGpuArgs {
  const float* k;
  const float* v;
  int64_t kv_stride;
  float* k_cache;
  float* v_cache;
  const int32_t* block_tables;
  int64_t block_table_stride;
  const int32_t* row_seq;
  const int32_t* positions;
  int64_t block_tokens;
  int64_t num_rows;
  int64_t num_kv_heads;
  int64_t head_dim;
};
gpuError_t kv_append_gpu(const KvAppendGpuArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
