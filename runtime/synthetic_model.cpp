// make_synthetic_model: the tensor list of a config (GGUF names, MODEL.md 5.3), one mapped
// arena, random blocks written in parallel, then bind_weights as for a file.
#include "runtime/synthetic_model.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "runtime/synthetic_fill.h"
#include "runtime/thread_pool.h"

namespace deltaserve::runtime {

namespace {

using kernels::DType;

constexpr size_t kTensorAlignBytes = 256;      // every tensor starts on this boundary
constexpr size_t kUnitBytes = size_t{1} << 18;  // generation work unit (per thread pick)

struct TensorSpec {
  std::string name;
  DType type = DType::F32;
  int num_dims = 1;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  synthetic::Fill fill;
  size_t offset = 0;
  size_t num_bytes = 0;
};

// Builds the tensor list in the names and shapes bind_weights expects.
class SpecList {
 public:
  SpecList(const ModelConfig& c, DType weight_type)
      : c_(c), weight_type_(weight_type), out_gain_(1.0f / std::sqrt(static_cast<float>(c.num_layers))) {}

  std::vector<TensorSpec> build() {
    const int64_t H = c_.num_embd, V = c_.num_vocab;
    matrix("token_embd.weight", {H, V}, 1.0f);
    norm1p("output_norm.weight", H);
    if (!c_.tied_embeddings) matrix("output.weight", {H, V}, 1.0f / std::sqrt(static_cast<float>(H)));
    for (int64_t i = 0; i < c_.num_layers; ++i) layer(i, c_.layer_kinds[static_cast<size_t>(i)]);
    if (c_.num_mtp_layers > 0) mtp();
    return std::move(specs_);
  }

 private:
  float in_std(int64_t num_in) const { return 1.0f / std::sqrt(static_cast<float>(num_in)); }

  void add(const std::string& name, DType type, std::initializer_list<int64_t> dims, synthetic::Fill fill) {
    TensorSpec t;
    t.name = name;
    t.type = type;
    t.num_dims = static_cast<int>(dims.size());
    std::copy(dims.begin(), dims.end(), t.ne.begin());
    t.fill = fill;
    t.num_bytes = kernels::dtype_row_bytes(type, t.ne[0]) * static_cast<size_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    specs_.push_back(std::move(t));
  }
  // A weight matrix {in, out(, experts)} in the requested type, zero mean.
  void matrix(const std::string& name, std::initializer_list<int64_t> dims, float std) {
    add(name, synthetic_matrix_type(weight_type_, *dims.begin()), dims, {0.0f, std});
  }
  void f32(const std::string& name, std::initializer_list<int64_t> dims, synthetic::Fill fill) {
    add(name, DType::F32, dims, fill);
  }
  void norm1p(const std::string& name, int64_t n) { f32(name, {n}, {1.0f, 0.2f}); }  // holds 1 + w

  void attention(const std::string& p) {
    const int64_t H = c_.num_embd, hd = c_.head_dim, nh = c_.num_heads, nkv = c_.num_kv_heads;
    matrix(p + "attn_q.weight", {H, 2 * nh * hd}, in_std(H));
    matrix(p + "attn_k.weight", {H, nkv * hd}, in_std(H));
    matrix(p + "attn_v.weight", {H, nkv * hd}, in_std(H));
    matrix(p + "attn_output.weight", {nh * hd, H}, in_std(nh * hd) * out_gain_);
    norm1p(p + "attn_q_norm.weight", hd);
    norm1p(p + "attn_k_norm.weight", hd);
  }

  void gdn(const std::string& p) {
    const int64_t H = c_.num_embd, Dc = c_.conv_channels(), Dv = c_.ssm_value_dim(), Hv = c_.ssm_v_heads;
    matrix(p + "attn_qkv.weight", {H, Dc}, in_std(H));
    matrix(p + "attn_gate.weight", {H, Dv}, in_std(H));
    matrix(p + "ssm_beta.weight", {H, Hv}, in_std(H));
    matrix(p + "ssm_alpha.weight", {H, Hv}, in_std(H));
    f32(p + "ssm_conv1d.weight", {c_.conv_kernel, Dc}, {0.0f, 0.5f});
    f32(p + "ssm_dt.bias", {Hv}, {0.0f, 0.5f});
    // ssm_a = -exp(A_log) with A_log = log U(1, 8): -U(1, 8), std of U(1, 8) = 7 / sqrt(12).
    f32(p + "ssm_a", {Hv}, {-4.5f, 7.0f / std::sqrt(12.0f)});
    f32(p + "ssm_norm.weight", {c_.ssm_head_dim}, {1.0f, 0.1f});
    matrix(p + "ssm_out.weight", {Dv, H}, in_std(Dv) * out_gain_);
  }

  void ffn(const std::string& p) {
    const int64_t H = c_.num_embd;
    if (!c_.is_moe()) {
      const int64_t I = c_.ffn_dim;
      matrix(p + "ffn_gate.weight", {H, I}, in_std(H));
      matrix(p + "ffn_up.weight", {H, I}, in_std(H));
      matrix(p + "ffn_down.weight", {I, H}, in_std(I) * out_gain_);
      return;
    }
    const int64_t E = c_.num_experts, Ie = c_.expert_ffn_dim, Is = c_.shared_ffn_dim;
    f32(p + "ffn_gate_inp.weight", {H, E}, {0.0f, in_std(H)});
    matrix(p + "ffn_gate_exps.weight", {H, Ie, E}, in_std(H));
    matrix(p + "ffn_up_exps.weight", {H, Ie, E}, in_std(H));
    matrix(p + "ffn_down_exps.weight", {Ie, H, E}, in_std(Ie) * out_gain_);
    f32(p + "ffn_gate_inp_shexp.weight", {H}, {0.0f, in_std(H)});
    matrix(p + "ffn_gate_shexp.weight", {H, Is}, in_std(H));
    matrix(p + "ffn_up_shexp.weight", {H, Is}, in_std(H));
    matrix(p + "ffn_down_shexp.weight", {Is, H}, in_std(Is) * out_gain_);
  }

  void layer(int64_t index, LayerKind kind) {
    const std::string p = "blk." + std::to_string(index) + ".";
    norm1p(p + "attn_norm.weight", c_.num_embd);
    norm1p(p + "post_attention_norm.weight", c_.num_embd);
    if (kind == LayerKind::Attention) attention(p);
    else gdn(p);
    ffn(p);
  }

  void mtp() {
    const int64_t H = c_.num_embd;
    const std::string p = "blk." + std::to_string(c_.num_layers) + ".nextn.";
    matrix(p + "eh_proj.weight", {2 * H, H}, in_std(2 * H));
    norm1p(p + "enorm.weight", H);
    norm1p(p + "hnorm.weight", H);
    norm1p(p + "shared_head_norm.weight", H);
    layer(c_.num_layers, LayerKind::Attention);
  }

  const ModelConfig& c_;
  DType weight_type_;
  float out_gain_;  // 1/sqrt(L) on output projections: the residual stream grows slowly
  std::vector<TensorSpec> specs_;
};

std::vector<TensorSpec> layout(const ModelConfig& config, DType weight_type, size_t& total_bytes) {
  const auto& types = synthetic_weight_types();
  if (std::find(types.begin(), types.end(), weight_type) == types.end()) {
    throw std::invalid_argument("synthetic weights: unsupported type " + std::string(kernels::dtype_name(weight_type)));
  }
  try {
    validate(config);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument("synthetic weights: invalid config: " + std::string(e.what()));
  }
  std::vector<TensorSpec> specs = SpecList(config, weight_type).build();
  size_t offset = 0;
  for (TensorSpec& t : specs) {
    t.offset = offset;
    offset += (t.num_bytes + kTensorAlignBytes - 1) / kTensorAlignBytes * kTensorAlignBytes;
  }
  total_bytes = offset;
  return specs;
}

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
double available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::strtod(line.c_str() + 13, nullptr) * 1024.0;  // kB
  }
  return 0;
}

// Anonymous memory, not touched here: the parallel fill faults the pages in on every thread
// (a zero-filled std::vector would first write all of it on one thread). Refused up front
// when the host lacks the memory: overcommit would let the fill be killed halfway instead.
std::shared_ptr<void> map_arena(size_t num_bytes) {
  const double available = available_host_bytes();
  if (available > 0 && static_cast<double>(num_bytes) > available) {
    throw std::runtime_error("synthetic weights: need " + std::to_string(num_bytes / 1000000) + " MB, the host has " +
                             std::to_string(static_cast<int64_t>(available / 1e6)) + " MB available");
  }
  void* p = mmap(nullptr, num_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw std::runtime_error("synthetic weights: cannot map " + std::to_string(num_bytes) + " bytes");
  }
  madvise(p, num_bytes, MADV_HUGEPAGE);  // advisory; fewer faults where THP is enabled
  return std::shared_ptr<void>(p, [num_bytes](void* q) { munmap(q, num_bytes); });
}

// One work unit: blocks [first_block, first_block + num_blocks) of one tensor.
struct Unit {
  size_t tensor = 0;
  int64_t first_block = 0;
  int64_t num_blocks = 0;
};

std::vector<Unit> make_units(const std::vector<TensorSpec>& specs) {
  std::vector<Unit> units;
  for (size_t i = 0; i < specs.size(); ++i) {
    const kernels::DTypeTraits& tr = kernels::dtype_traits(specs[i].type);
    const int64_t num_blocks = static_cast<int64_t>(specs[i].num_bytes / tr.block_bytes);
    const int64_t per_unit = std::max<int64_t>(1, static_cast<int64_t>(kUnitBytes / tr.block_bytes));
    for (int64_t b = 0; b < num_blocks; b += per_unit) units.push_back({i, b, std::min(per_unit, num_blocks - b)});
  }
  return units;
}

}  // namespace

const std::vector<DType>& synthetic_weight_types() {
  static const std::vector<DType> types{DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                        DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return types;
}

DType parse_synthetic_weight_type(const std::string& name) {
  std::string wanted = name, known;
  std::transform(wanted.begin(), wanted.end(), wanted.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (DType t : synthetic_weight_types()) {
    const std::string type_name(kernels::dtype_name(t));
    if (type_name == wanted) return t;
    std::string lower = type_name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    known += (known.empty() ? "" : ", ") + lower;
  }
  throw std::invalid_argument("unknown weight type '" + name + "' (expected one of: " + known + ")");
}

DType synthetic_matrix_type(DType weight_type, int64_t row_elements) {
  if (row_elements % kernels::dtype_traits(weight_type).block_elements == 0) return weight_type;
  if (row_elements % kernels::dtype_traits(DType::Q8_0).block_elements == 0) return DType::Q8_0;
  return DType::F16;
}

int64_t synthetic_model_bytes(const ModelConfig& config, DType weight_type) {
  size_t total = 0;
  layout(config, weight_type, total);
  return static_cast<int64_t>(total);
}

std::unique_ptr<LoadedModel> make_synthetic_model(const ModelConfig& config, DType weight_type, uint64_t seed,
                                                  int num_threads) {
  size_t total_bytes = 0;
  const std::vector<TensorSpec> specs = layout(config, weight_type, total_bytes);
  auto model = std::make_unique<LoadedModel>();
  model->config = config;
  model->format = "synthetic";
  model->path = "synthetic:" + (config.name.empty() ? std::string("model") : config.name) + ":" +
                std::string(kernels::dtype_name(weight_type)) + ":seed=" + std::to_string(seed);
  std::shared_ptr<void> arena = map_arena(std::max<size_t>(total_bytes, 1));
  std::byte* base = static_cast<std::byte*>(arena.get());

  std::vector<synthetic::Stream> streams;
  for (const TensorSpec& t : specs) streams.push_back(synthetic::Stream::of(seed, t.name));
  const std::vector<Unit> units = make_units(specs);
  const ThreadPool pool(num_threads);
  pool.run(static_cast<int64_t>(units.size()), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const Unit& unit = units[static_cast<size_t>(u)];
      const TensorSpec& t = specs[unit.tensor];
      const size_t block_bytes = kernels::dtype_traits(t.type).block_bytes;
      std::byte* dst = base + t.offset + static_cast<size_t>(unit.first_block) * block_bytes;
      synthetic::fill_blocks(t.type, streams[unit.tensor], t.fill, unit.first_block, unit.num_blocks, dst);
    }
  });

  for (const TensorSpec& t : specs) {
    TensorView v;
    v.name = t.name;
    v.type = t.type;
    v.num_dims = t.num_dims;
    v.ne = t.ne;
    v.data = base + t.offset;
    v.num_bytes = t.num_bytes;
    model->tensors.emplace(t.name, v);
  }
  model->mappings.push_back(std::move(arena));
  model->weights = bind_weights(model->config, model->tensors, model->path);
  return model;
}

}  // namespace deltaserve::runtime
