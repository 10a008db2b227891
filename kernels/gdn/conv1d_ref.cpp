#include <cmath>
#include <vector>

#include "kernels/gdn/conv1d.h"

namespace deltaserve::kernels {

void causal_conv1d_silu_ref(const CausalConvArgs& a, const ParallelFor& pf) {
  const int64_t history = a.kernel - 1;
  pf.run(a.channels, [&](int64_t begin, int64_t end) {
    // window = [state (history values) | x_0 .. x_{T-1}] for one channel.
    std::vector<float> window(static_cast<size_t>(history + a.num_tokens));
    for (int64_t c = begin; c < end; ++c) {
      for (int64_t j = 0; j < history; ++j) window[static_cast<size_t>(j)] = a.state[j * a.channels + c];
      for (int64_t t = 0; t < a.num_tokens; ++t)
        window[static_cast<size_t>(history + t)] = a.x[t * a.x_stride + c];
      const float* w = a.w + c * a.kernel;
      for (int64_t t = 0; t < a.num_tokens; ++t) {
        float sum = 0.0f;
        for (int64_t j = 0; j < a.kernel; ++j) sum += w[j] * window[static_cast<size_t>(t + j)];
        a.y[t * a.y_stride + c] = sum / (1.0f + std::exp(-sum));
        if (a.state_after_row != nullptr) {
          float* snapshot = a.state_after_row + t * history * a.channels;
          for (int64_t j = 0; j < history; ++j)
            snapshot[j * a.channels + c] = window[static_cast<size_t>(t + 1 + j)];
        }
      }
      for (int64_t j = 0; j < history; ++j)
        a.state[j * a.channels + c] = window[static_cast<size_t>(a.num_tokens + j)];
    }
  });
}

}  // namespace deltaserve::kernels
