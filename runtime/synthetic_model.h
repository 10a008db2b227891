// Random weights of the exact shapes of a ModelConfig (usually a preset), for benchmarks
// and tests without a model file. The result is an ordinary LoadedModel (GGUF names and
// conventions, bound by bind_weights), so every backend takes it unchanged.
//
// Values are a pure function of (seed, tensor name, block index): a counter-based hash, so
// the bytes do not depend on the number of threads. Quantised matrices are written as
// random blocks directly (no float pass, no quantiser): generation runs at memory speed
// over the pool. Scales keep activations sane through any depth:
//   matrices            zero mean, std 1/sqrt(in) (output projections also / sqrt(layers)),
//                       so a matmul roughly preserves RMS and every layer adds a little;
//   token embedding     std 1;  router: std 1/sqrt(H), so routing is random and spread;
//   (1 + w) norms       1 +- 0.2;  GDN gated norm: 1 +- 0.1 (MODEL.md 7.2);
//   ssm_a = -exp(A_log) -U(1, 8);  dt bias: std 0.5;  conv taps: std 0.5.
// Norms, conv taps, ssm_a, dt bias, router and shared-expert gate stay F32 as in real
// files. A matrix whose rows do not fit the type's block (e.g. a K-quant with 64 columns)
// falls back to Q8_0 (or F16 when not a multiple of 32), as llama-quantize falls back.
//
// Startup only; any thread; blocks while generating (on num_threads threads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k" (ASCII case-insensitive). Throws
// std::invalid_argument naming the value and the accepted names.
kernels::DType parse_synthetic_weight_type(const std::string& name);
// The accepted types, in the order above.
const std::vector<kernels::DType>& synthetic_weight_types();

// The type a matrix with rows of row_elements elements gets when weight_type is asked for.
kernels::DType synthetic_matrix_type(kernels::DType weight_type, int64_t row_elements);

// Bytes of all tensors (trunk, MTP block, F32 extras) of make_synthetic_model(config,
// weight_type, ...), without allocating. config must be validated.
int64_t synthetic_model_bytes(const ModelConfig& config, kernels::DType weight_type);

// Allocates and fills every tensor the config needs (the MTP block when num_mtp_layers > 0).
// num_threads <= 0 uses every hardware thread. Throws std::invalid_argument for a type
// outside synthetic_weight_types() or an invalid config; std::runtime_error when the
// memory cannot be mapped.
std::unique_ptr<LoadedModel> make_synthetic_model(const ModelConfig& config, kernels::DType weight_type,
                                                  uint64_t seed, int num_threads);

}  // namespace deltaserve::runtime
