// matmul_ref against a naive double-precision reference over a grid of shapes and every
// weight type, plus its determinism contract: bit-identical results whatever the ParallelFor
// split, the batch size or the neighbouring rows, and equal to dot_row. Also the expert-stack
// helper and the embedding lookup.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/embedding/embedding.h"
#include "kernels/matmul/matmul.h"
#include "kernels/quant.h"

namespace deltaserve::kernels {
namespace {

constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                               DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Splits [0, n) into uneven chunks (sizes 1, 3, 2, 5, 1, 3, ...) and runs each on its own
// std::thread, all at once.
class UnevenThreadFor final : public ParallelFor {
 public:
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    static constexpr int64_t kSizes[] = {1, 3, 2, 5};
    std::vector<std::thread> threads;
    int64_t begin = 0;
    for (size_t k = 0; begin < n; ++k) {
      const int64_t end = std::min(n, begin + kSizes[k % 4]);
      threads.emplace_back([&fn, begin, end] { fn(begin, end); });
      begin = end;
    }
    for (std::thread& t : threads) t.join();
  }
};

// A random weight matrix stored in `type`, with its dequantised values.
struct Weights {
  DType type;
  int64_t num_in, num_out;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // num_out x num_in, what the kernel multiplies with
};

Weights make_weights(DType type, int64_t num_in, int64_t num_out, std::mt19937& rng) {
  Weights w{type, num_in, num_out, dtype_row_bytes(type, num_in), {}, {}};
  w.bytes.resize(w.row_bytes * num_out);
  w.values.resize(static_cast<size_t>(num_in * num_out));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(num_in);
  for (int64_t o = 0; o < num_out; ++o) {
    for (float& v : row) v = normal(rng);
    quantize_row(type, row.data(), w.bytes.data() + o * w.row_bytes, num_in);
    dequantize_row(type, w.bytes.data() + o * w.row_bytes, w.values.data() + o * num_in, num_in);
  }
  return w;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

MatmulArgs args_for(const Weights& w, const float* x, int64_t num_rows, int64_t x_stride,
                    float* y, int64_t y_stride) {
  return MatmulArgs{w.bytes.data(), w.type, w.num_in, w.num_out, w.row_bytes,
                    x,              num_rows, x_stride, y,       y_stride};
}

TEST(Matmul, MatchesDoubleReferenceOverShapesAndTypes) {
  std::mt19937 rng(42);
  UnevenThreadFor threads;
  for (DType type : kAllTypes) {
    const int64_t block = dtype_traits(type).block_elements;
    for (int64_t num_in : {int64_t{256}, int64_t{512}, int64_t{37}, int64_t{264}}) {
      if (num_in % block != 0) continue;
      for (int64_t num_out : {int64_t{1}, int64_t{5}, int64_t{33}}) {
        const Weights w = make_weights(type, num_in, num_out, rng);
        for (int64_t num_rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{17}}) {
          const int64_t x_stride = num_in + 3, y_stride = num_out + 2;  // padded rows
          const std::vector<float> x = random_floats(num_rows * x_stride, rng);
          std::vector<float> y(num_rows * y_stride, -7.0f);
          matmul_ref(args_for(w, x.data(), num_rows, x_stride, y.data(), y_stride), threads);
          for (int64_t r = 0; r < num_rows; ++r) {
            for (int64_t o = 0; o < num_out; ++o) {
              double ref = 0, magnitude = 0;
              for (int64_t i = 0; i < num_in; ++i) {
                const double p = double(w.values[o * num_in + i]) * x[r * x_stride + i];
                ref += p;
                magnitude += std::fabs(p);
              }
              ASSERT_NEAR(y[r * y_stride + o], ref, 1e-6 * magnitude)
                  << dtype_name(type) << " in=" << num_in << " out=" << num_out
                  << " rows=" << num_rows << " r=" << r << " o=" << o;
            }
            for (int64_t o = num_out; o < y_stride; ++o) {
              ASSERT_EQ(y[r * y_stride + o], -7.0f) << "wrote past num_out";
            }
          }
        }
      }
    }
  }
}

// Row r of a batch of 7 == row r computed alone == dot_row, bit for bit, under serial and
// uneven threaded splits (num_out = 70 gives 5 tasks, one partial).
TEST(Matmul, BitIdenticalAcrossBatchSplitAndDotRow) {
  std::mt19937 rng(5);
  UnevenThreadFor threads;
  const int64_t num_in = 512, num_out = 70, num_rows = 7;
  for (DType type : kAllTypes) {
    const Weights w = make_weights(type, num_in, num_out, rng);
    const std::vector<float> x = random_floats(num_rows * num_in, rng);
    std::vector<float> batch_serial(num_rows * num_out), batch_threads(num_rows * num_out);
    matmul_ref(args_for(w, x.data(), num_rows, num_in, batch_serial.data(), num_out), serial_for());
    matmul_ref(args_for(w, x.data(), num_rows, num_in, batch_threads.data(), num_out), threads);
    ASSERT_EQ(0, std::memcmp(batch_serial.data(), batch_threads.data(),
                             batch_serial.size() * sizeof(float))) << dtype_name(type);
    for (int64_t r = 0; r < num_rows; ++r) {
      std::vector<float> alone(num_out);
      matmul_ref(args_for(w, x.data() + r * num_in, 1, num_in, alone.data(), num_out), threads);
      for (int64_t o = 0; o < num_out; ++o) {
        const float dot = dot_row(type, w.bytes.data() + o * w.row_bytes, x.data() + r * num_in, num_in);
        ASSERT_EQ(std::bit_cast<uint32_t>(alone[o]), std::bit_cast<uint32_t>(batch_serial[r * num_out + o]))
            << dtype_name(type) << " r=" << r << " o=" << o;
        ASSERT_EQ(std::bit_cast<uint32_t>(dot), std::bit_cast<uint32_t>(alone[o]))
            << dtype_name(type) << " r=" << r << " o=" << o;
      }
    }
    // Any 3 consecutive rows (a group of 3 in the kernel) agree with the full batch too.
    std::vector<float> three(3 * num_out);
    matmul_ref(args_for(w, x.data() + 2 * num_in, 3, num_in, three.data(), num_out), serial_for());
    ASSERT_EQ(0, std::memcmp(three.data(), batch_serial.data() + 2 * num_out,
                             three.size() * sizeof(float))) << dtype_name(type);
  }
}

TEST(Matmul, AccumulateAddsTheRoundedDot) {
  std::mt19937 rng(9);
  const Weights w = make_weights(DType::Q4_K, 256, 20, rng);
  const std::vector<float> x = random_floats(3 * 256, rng);
  std::vector<float> y = random_floats(3 * 20, rng);
  const std::vector<float> y0 = y;
  MatmulArgs args = args_for(w, x.data(), 3, 256, y.data(), 20);
  args.accumulate = true;
  matmul_ref(args, serial_for());
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t o = 0; o < 20; ++o) {
      const float dot = dot_row(DType::Q4_K, w.bytes.data() + o * w.row_bytes, x.data() + r * 256, 256);
      ASSERT_EQ(y[r * 20 + o], y0[r * 20 + o] + dot);
    }
  }
}

TEST(Matmul, EmptyShapesDoNothing) {
  std::mt19937 rng(1);
  const Weights w = make_weights(DType::F32, 8, 4, rng);
  std::vector<float> x(8, 1.0f), y(4, 3.0f);
  matmul_ref(args_for(w, x.data(), 0, 8, y.data(), 4), serial_for());
  EXPECT_EQ(y, std::vector<float>(4, 3.0f));
}

TEST(Matmul, ExpertStackSelectsTheExpertMatrix) {
  std::mt19937 rng(13);
  const int64_t num_in = 64, num_out = 6, num_experts = 3;
  const Weights stacked = make_weights(DType::Q8_0, num_in, num_out * num_experts, rng);
  const std::vector<float> x = random_floats(2 * num_in, rng);
  for (int64_t e = 0; e < num_experts; ++e) {
    std::vector<float> y(2 * num_out), expected(2 * num_out);
    MatmulArgs args{stacked.bytes.data(), DType::Q8_0, num_in, num_out, stacked.row_bytes,
                    x.data(), 2, num_in, y.data(), num_out};
    matmul_expert_ref(args, e, serial_for());
    EXPECT_EQ(expert_weights(stacked.bytes.data(), e, num_out, stacked.row_bytes),
              stacked.bytes.data() + e * num_out * stacked.row_bytes);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t o = 0; o < num_out; ++o) {
        expected[r * num_out + o] = dot_row(DType::Q8_0,
                                            stacked.bytes.data() + (e * num_out + o) * stacked.row_bytes,
                                            x.data() + r * num_in, num_in);
      }
    }
    EXPECT_EQ(y, expected) << "expert " << e;
  }
}

TEST(Embedding, LooksUpDecodedRows) {
  std::mt19937 rng(17);
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q6_K}) {
    const Weights table = make_weights(type, 256, 10, rng);
    const std::vector<int32_t> tokens = {3, 0, 9, 3};
    std::vector<float> out(tokens.size() * 256);
    embedding_lookup_ref(table.bytes.data(), type, 256, tokens.data(),
                         static_cast<int64_t>(tokens.size()), out.data());
    for (size_t t = 0; t < tokens.size(); ++t) {
      for (int64_t i = 0; i < 256; ++i) {
        ASSERT_EQ(out[t * 256 + i], table.values[tokens[t] * 256 + i]) << dtype_name(type);
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels
