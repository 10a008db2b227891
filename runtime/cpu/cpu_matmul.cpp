#include <stdexcept>

#include "kernels/matmul/matmul.h"
#include "runtime/cpu/cpu_layers.h"

namespace deltaserve::runtime::cpu {

const float* f32_data(const TensorView& t) {
  if (t.type != kernels::DType::F32) throw std::logic_error("expected an F32 tensor: " + t.name);
  return reinterpret_cast<const float*>(t.data);
}

void matmul(const LayerContext& ctx, const TensorView& w, const float* x, int64_t num_rows,
            float* y, int64_t expert, bool accumulate) {
  const int64_t num_in = w.ne[0], num_out = w.ne[1];
  const size_t row_bytes = w.row_bytes();
  // slice() honours the stride of views into a fused gate_up_exps tensor.
  const std::byte* base = expert >= 0 ? w.slice(expert) : w.data;
  kernels::MatmulArgs args{};
  args.w = base;
  args.w_type = w.type;
  args.num_in = num_in;
  args.num_out = num_out;
  args.w_row_bytes = row_bytes;
  args.x = x;
  args.num_rows = num_rows;
  args.x_stride = num_in;
  args.y = y;
  args.y_stride = num_out;
  args.accumulate = accumulate;
  kernels::matmul_ref(args, ctx.pool);
}

}  // namespace deltaserve::runtime::cpu
