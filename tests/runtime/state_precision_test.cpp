// CacheConfig::state_precision: the names parse both ways, and the CPU backend (f32 states
// only) refuses bf16 with a line that says so, while f32 still builds.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_preset.h"
#include "runtime/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

TEST(StatePrecision, NamesRoundTrip) {
  EXPECT_EQ(parse_state_precision("f32"), StatePrecision::kF32);
  EXPECT_EQ(parse_state_precision("bf16"), StatePrecision::kBf16);
  EXPECT_EQ(parse_state_precision(state_precision_name(StatePrecision::kBf16)), StatePrecision::kBf16);
  EXPECT_EQ(parse_state_precision(state_precision_name(StatePrecision::kF32)), StatePrecision::kF32);
  for (const char* bad : {"", "fp32", "BF16", "f16", "bf16 "}) EXPECT_FALSE(parse_state_precision(bad).has_value()) << bad;
  EXPECT_EQ(CacheConfig{}.state_precision, StatePrecision::kF32);
}

TEST(StatePrecision, CpuBackendRefusesBf16) {
  const std::unique_ptr<LoadedModel> model = make_synthetic_model(find_preset("tiny-moe").config, kernels::DType::F32, 5, 1);
  CacheConfig cache{1, 16, 4};
  EXPECT_NO_THROW(CpuBackend(*model, cache, 1));
  cache.state_precision = StatePrecision::kBf16;
  try {
    CpuBackend backend(*model, cache, 1);
    ADD_FAILURE() << "the CPU backend accepted bf16 states";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent-state precision bf16 is supported by the GPU backend only"),
              std::string::npos)
        << e.what();
  }
}

TEST(DecodeMatvec, NamesRoundTripAndTheCpuBackendRefusesTheTensorCoreForms) {
  for (DecodeMatvec m : {DecodeMatvec::kAuto, DecodeMatvec::kFma, DecodeMatvec::kTensor, DecodeMatvec::kStaged})
    EXPECT_EQ(parse_decode_matvec(decode_matvec_name(m)), m);
  for (const char* bad : {"", "cuda", "Tensor", "tensor-cores", "fma "}) EXPECT_FALSE(parse_decode_matvec(bad).has_value()) << bad;
  EXPECT_EQ(CacheConfig{}.decode_matvec, DecodeMatvec::kAuto);
  const std::unique_ptr<LoadedModel> model = make_synthetic_model(find_preset("tiny-moe").config, kernels::DType::F32, 5, 1);
  CacheConfig cache{1, 16, 4};
  cache.decode_matvec = DecodeMatvec::kFma;
  EXPECT_NO_THROW(CpuBackend(*model, cache, 1));
  for (DecodeMatvec gpu_only : {DecodeMatvec::kTensor, DecodeMatvec::kStaged}) {
    const std::string name = decode_matvec_name(gpu_only);
    cache.decode_matvec = gpu_only;
    try {
      CpuBackend backend(*model, cache, 1);
      ADD_FAILURE() << "the CPU backend accepted the " << name << " matvec";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + name + "' is supported by the GPU backend only"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace deltaserve::runtime
