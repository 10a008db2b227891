// Internal to the GPU kernels (included by gdn.cu and gdn_prefill.cu only): the element type
// of the GDN delta state pools (GdnStepArgs::delta_type). f32 elements as they are; bf16
// elements (uint16_t bits) widened exactly on load and rounded to nearest even on store
// (gpu::float_to_bf16_bits, the host's fp32_to_bf16 bits), so both kernels agree.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels::detail {

__device__ __forceinline__ float from_state(float v) { return v; }
__device__ __forceinline__ float from_state(uint16_t bits) { return gpu::bf16_bits_to_float(bits); }
template <class StateT>
__device__ __forceinline__ StateT to_state(float v) {
  if constexpr (sizeof(StateT) == 2) return gpu::float_to_bf16_bits(v);
  else return v;
}

}  // namespace deltaserve::kernels::detail
