// Converts HF checkpoint tensors to GGUF names and conventions (MODEL.md 5.4 and 5.5), as
// llama.cpp's convert_hf_to_gguf.py does: +1 on zero-centred norms, ssm_a = -exp(A_log),
// conv1d squeezed to {Kc, Dc}, GDN value heads reordered grouped -> tiled, fused experts
// split, per-expert tensors stacked, mtp.* renamed to block L.
//
// Byte moves (permutations, splits, stacking) keep the source dtype; tensors that GGUF holds
// in F32 (norms, conv, ssm_a, dt bias, router, shared-expert gate) are converted to F32 (the
// +1 and -exp are computed in F32, as HF does at run time). Untransformed tensors stay views
// of the mapped files unless misaligned for their element type. Startup only.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "runtime/model_config.h"
#include "runtime/tensor_view.h"

namespace deltaserve::runtime {

class HfConverter {
 public:
  // config must be validated; its tied_embeddings and num_mtp_layers decide whether
  // lm_head.weight and mtp.* are used (they are skipped otherwise). New buffers are
  // appended to `owned`, which must outlive the returned views.
  HfConverter(const ModelConfig& config, std::string source,
              std::vector<std::vector<std::byte>>& owned);

  // hf_tensors: checkpoint name -> view (HF shape reversed into ne). Returns GGUF name ->
  // view. Throws std::runtime_error naming the source, the tensor and what is wrong.
  std::map<std::string, TensorView> convert(const std::map<std::string, TensorView>& hf_tensors);

  // "model.language_model.x" -> "model.x"; other names unchanged.
  static std::string normalize_name(const std::string& hf_name);

  enum class Transform;  // what happens to one checkpoint tensor (defined in the .cpp)
  struct Target;         // its GGUF name and transform

 private:

  Target map_name(const std::string& name) const;
  void add(const std::string& hf_name, const Target& target, const TensorView& src);
  void add_expert_part(const std::string& hf_name, const Target& target, const TensorView& src);
  void stack_experts();
  void split_gate_up(const std::string& hf_name, const Target& target, const TensorView& src);
  void put(const std::string& gguf_name, TensorView view);
  TensorView own(const std::string& name, const TensorView& like, std::vector<std::byte> bytes);
  TensorView own_f32(const std::string& name, const TensorView& like, const std::vector<float>& values);
  void expect_shape(const std::string& hf_name, const TensorView& t, std::array<int64_t, 4> ne) const;
  [[noreturn]] void fail(const std::string& hf_name, const std::string& what) const;

  // Reorders Hv head blocks of rows_per_head rows starting at first_row: GGUF head n takes
  // HF head (n mod Hk) * r + n / Hk.
  std::vector<std::byte> permute_rows(const std::byte* src, size_t row_bytes, int64_t num_rows,
                                      int64_t first_row, int64_t rows_per_head) const;
  std::vector<std::byte> permute_columns(const TensorView& src, int64_t cols_per_head) const;

  const ModelConfig& config_;
  std::string source_;
  std::vector<std::vector<std::byte>>& owned_;
  std::map<std::string, TensorView> out_;
  // Legacy per-expert tensors, by GGUF name of the stacked tensor, indexed by expert.
  std::map<std::string, std::vector<TensorView>> expert_parts_;
};

}  // namespace deltaserve::runtime
