// `deltaserve inspect FILE_OR_DIR`: what a model file holds, as the engine will see it
// (hyperparameters after validation, tensors under their GGUF names after HF conversion).
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>

#include "cli/commands.h"
#include "runtime/model_weights.h"

namespace deltaserve::cli {
namespace {

using runtime::LoadedModel;
using runtime::ModelConfig;

std::string shape_string(const runtime::TensorView& t) {
  std::string s = "{";
  for (int i = 0; i < t.num_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "}";
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, units[u]);
  return buf;
}

void print_format(const LoadedModel& m) {
  std::printf("path              %s\n", m.path.c_str());
  if (m.gguf) {
    std::printf("format            gguf v%u (alignment %zu, %zu metadata keys, %s)\n", m.gguf->version(),
                m.gguf->alignment(), m.gguf->metadata().size(), human_bytes(static_cast<double>(m.gguf->file_bytes())).c_str());
  } else {
    std::printf("format            hf (%zu safetensors file(s))\n", m.mappings.size());
  }
  const ModelConfig& c = m.config;
  std::printf("architecture      %s (%s)\n", c.is_moe() ? "qwen35moe" : "qwen35", c.is_moe() ? "MoE" : "dense");
  std::printf("name              %s\n", c.name.empty() ? "-" : c.name.c_str());
}

void print_hyperparameters(const LoadedModel& m) {
  const ModelConfig& c = m.config;
  std::string kinds;
  for (runtime::LayerKind k : c.layer_kinds) kinds += k == runtime::LayerKind::Attention ? 'A' : 'G';
  std::printf("hyperparameters\n");
  std::printf("  vocab (V)               %lld\n", static_cast<long long>(c.num_vocab));
  std::printf("  hidden (H)              %lld\n", static_cast<long long>(c.num_embd));
  std::printf("  trunk layers (L)        %lld: %lld Gated DeltaNet, %lld attention\n", static_cast<long long>(c.num_layers),
              static_cast<long long>(c.num_gdn_layers()), static_cast<long long>(c.num_attention_layers()));
  std::printf("  layer kinds             %s (G = Gated DeltaNet, A = attention)\n", kinds.c_str());
  std::printf("  full attention every    %lld\n", static_cast<long long>(c.full_attention_interval));
  std::printf("  context length          %lld\n", static_cast<long long>(c.context_length));
  std::printf("  rms eps                 %g\n", static_cast<double>(c.rms_eps));
  std::printf("  attention heads         %lld q, %lld kv, head dim %lld\n", static_cast<long long>(c.num_heads),
              static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim));
  std::printf("  rope                    %lld dims, base %g\n", static_cast<long long>(c.rope_dims),
              static_cast<double>(c.rope_base));
  std::printf("  gdn heads               %lld key, %lld value, head dim %lld, conv kernel %lld\n",
              static_cast<long long>(c.ssm_k_heads), static_cast<long long>(c.ssm_v_heads),
              static_cast<long long>(c.ssm_head_dim), static_cast<long long>(c.conv_kernel));
  if (c.is_moe()) {
    std::printf("  experts                 %lld (%lld used), expert ffn %lld, shared ffn %lld\n",
                static_cast<long long>(c.num_experts), static_cast<long long>(c.num_experts_used),
                static_cast<long long>(c.expert_ffn_dim), static_cast<long long>(c.shared_ffn_dim));
  } else {
    std::printf("  ffn (I)                 %lld\n", static_cast<long long>(c.ffn_dim));
  }
  std::printf("  tied embeddings         %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("  bos / eos               %d / %d\n", c.bos_token, c.eos_token);
  std::printf("  chat template           %s\n",
              m.chat_template.empty() ? "none" : (std::to_string(m.chat_template.size()) + " chars").c_str());
  if (!m.tokenizer_json_path.empty()) std::printf("  tokenizer               %s\n", m.tokenizer_json_path.c_str());
  if (m.weights.has_mtp) {
    std::printf("MTP               present (%lld layer, block %lld)\n", static_cast<long long>(c.num_mtp_layers),
                static_cast<long long>(c.num_layers));
  } else {
    std::printf("MTP               absent\n");
  }
}

void print_tensors(const LoadedModel& m) {
  std::printf("tensors\n  %-40s %-5s %-20s %14s\n", "name", "type", "shape (ggml ne)", "bytes");
  std::map<std::string, size_t> bytes_by_type;
  size_t total = 0;
  // File order for GGUF; by name for HF (converted tensors have no file order).
  auto print_one = [&](const runtime::TensorView& t) {
    const std::string type(kernels::dtype_name(t.type));
    std::printf("  %-40s %-5s %-20s %14zu\n", t.name.c_str(), type.c_str(), shape_string(t).c_str(), t.num_bytes);
    bytes_by_type[type] += t.num_bytes;
    total += t.num_bytes;
  };
  if (m.gguf) {
    for (const auto& t : m.gguf->tensors()) print_one(t);
  } else {
    for (const auto& [name, t] : m.tensors) print_one(t);
  }
  std::printf("tensor count      %zu\n", m.gguf ? m.gguf->tensors().size() : m.tensors.size());
  std::printf("bytes by type\n");
  for (const auto& [type, bytes] : bytes_by_type) {
    std::printf("  %-5s %14zu  (%s)\n", type.c_str(), bytes, human_bytes(static_cast<double>(bytes)).c_str());
  }
  std::printf("  total %14zu  (%s)\n", total, human_bytes(static_cast<double>(total)).c_str());
}

}  // namespace

int inspect_main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fprintf(stderr,
                 "usage: deltaserve inspect FILE_OR_DIR\n"
                 "  A GGUF file or an HF directory (config.json + *.safetensors): prints the format,\n"
                 "  architecture, hyperparameters, every tensor (name, type, shape, bytes) and totals.\n");
    return argc == 2 ? 0 : 2;
  }
  std::unique_ptr<LoadedModel> model;
  try {
    model = runtime::load_model(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  print_format(*model);
  print_hyperparameters(*model);
  print_tensors(*model);
  return 0;
}

}  // namespace deltaserve::cli
