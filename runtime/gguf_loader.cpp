#include "runtime/gguf_loader.h"

#include <limits>
#include <stdexcept>

namespace deltaserve::runtime {

namespace {

// Reads "{arch}.<name>" keys with llama.cpp's defaults for the optional ones.
class HparamReader {
 public:
  HparamReader(const GgufFile& file, std::string arch) : file_(file), prefix_(std::move(arch) + ".") {}

  bool has(const std::string& name) const { return file_.find(prefix_ + name) != nullptr; }

  int64_t get(const std::string& name) const { return checked(prefix_ + name); }
  int64_t get(const std::string& name, int64_t fallback) const {
    return has(name) ? get(name) : fallback;
  }
  float get_float(const std::string& name) const {
    return static_cast<float>(file_.get_float(prefix_ + name));
  }
  float get_float(const std::string& name, float fallback) const {
    return has(name) ? get_float(name) : fallback;
  }

  // Integers are read as uint64 and must fit comfortably; validate() enforces the real
  // ranges afterwards.
  int64_t checked(const std::string& key) const {
    const uint64_t v = file_.get_uint(key);
    if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) * 4) {
      throw GgufError(file_.path() + ": key '" + key + "': value " + std::to_string(v) +
                      " is out of range");
    }
    return static_cast<int64_t>(v);
  }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

Architecture parse_architecture(const GgufFile& file) {
  const std::string& arch = file.get_string("general.architecture");
  if (arch == "qwen35") return Architecture::Dense;
  if (arch == "qwen35moe") return Architecture::Moe;
  throw GgufError(file.path() + ": key 'general.architecture': unsupported architecture '" +
                  arch + "' (expected qwen35 or qwen35moe)");
}

// llama.cpp takes the vocabulary size from the tokenizer's token list; files without one
// fall back to the embedding's rows (bind_weights checks the two agree either way).
int64_t vocab_size(const GgufFile& file, const HparamReader& h) {
  if (h.has("vocab_size")) return h.get("vocab_size");
  if (file.find("tokenizer.ggml.tokens") != nullptr) {
    return static_cast<int64_t>(file.get_string_array("tokenizer.ggml.tokens").size());
  }
  if (const TensorView* embd = file.find_tensor("token_embd.weight")) return embd->ne[1];
  throw GgufError(file.path() + ": key 'tokenizer.ggml.tokens': missing (and no token_embd.weight)");
}

int32_t token_id(const GgufFile& file, const HparamReader& h, const std::string& key) {
  if (file.find(key) == nullptr) return -1;
  return static_cast<int32_t>(std::min<int64_t>(h.checked(key), std::numeric_limits<int32_t>::max()));
}

void read_ssm(const GgufFile& file, const HparamReader& h, ModelConfig& c) {
  c.conv_kernel = h.get("ssm.conv_kernel");
  c.ssm_head_dim = h.get("ssm.state_size");
  c.ssm_k_heads = h.get("ssm.group_count");
  c.ssm_v_heads = h.get("ssm.time_step_rank");
  const int64_t inner = h.get("ssm.inner_size");
  if (inner != c.ssm_v_heads * c.ssm_head_dim) {
    throw GgufError(file.path() + ": key 'ssm.inner_size': " + std::to_string(inner) +
                    " != time_step_rank (" + std::to_string(c.ssm_v_heads) +
                    ") * state_size (" + std::to_string(c.ssm_head_dim) + ")");
  }
}

void read_attention(const GgufFile& file, const HparamReader& h, ModelConfig& c) {
  c.num_heads = h.get("attention.head_count");
  c.num_kv_heads = h.get("attention.head_count_kv", c.num_heads);
  const int64_t default_head_dim = c.num_heads > 0 ? c.num_embd / c.num_heads : 0;
  c.head_dim = h.get("attention.key_length", default_head_dim);
  const int64_t value_length = h.get("attention.value_length", c.head_dim);
  if (value_length != c.head_dim) {
    throw GgufError(file.path() + ": key 'attention.value_length': " +
                    std::to_string(value_length) + " != key_length " +
                    std::to_string(c.head_dim) + " is not supported");
  }
  c.rms_eps = h.get_float("attention.layer_norm_rms_epsilon");
  c.rope_dims = h.get("rope.dimension_count", c.head_dim);
  c.rope_base = h.get_float("rope.freq_base", 10000.0f);  // llama.cpp's default
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& file) {
  ModelConfig c;
  c.arch = parse_architecture(file);
  const HparamReader h(file, file.get_string("general.architecture"));
  if (file.find("general.name") != nullptr) c.name = file.get_string("general.name");

  const int64_t block_count = h.get("block_count");
  c.num_mtp_layers = h.get("nextn_predict_layers", 0);
  if (c.num_mtp_layers > block_count) {
    throw GgufError(file.path() + ": key 'nextn_predict_layers': " +
                    std::to_string(c.num_mtp_layers) + " exceeds block_count " +
                    std::to_string(block_count));
  }
  c.num_layers = block_count - c.num_mtp_layers;
  c.context_length = h.get("context_length");
  c.num_embd = h.get("embedding_length");
  c.num_vocab = vocab_size(file, h);
  read_attention(file, h, c);
  read_ssm(file, h, c);
  c.full_attention_interval = h.get("full_attention_interval", 4);
  if (c.is_moe()) {
    c.num_experts = h.get("expert_count");
    c.num_experts_used = h.get("expert_used_count");
    c.expert_ffn_dim = h.get("expert_feed_forward_length");
    c.shared_ffn_dim = h.get("expert_shared_feed_forward_length");
  } else {
    c.ffn_dim = h.get("feed_forward_length");
  }
  c.bos_token = token_id(file, h, "tokenizer.ggml.bos_token_id");
  c.eos_token = token_id(file, h, "tokenizer.ggml.eos_token_id");
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  try {
    c.layer_kinds = layer_kinds_from_interval(c.num_layers, c.full_attention_interval);
    validate(c);
  } catch (const std::runtime_error& e) {
    throw GgufError(file.path() + ": hyperparameters: " + e.what());
  }
  return c;
}

std::unique_ptr<LoadedModel> load_gguf_model(const std::string& path) {
  auto model = std::make_unique<LoadedModel>();
  model->path = path;
  model->format = "gguf";
  model->gguf = GgufFile::open(path);
  const GgufFile& file = *model->gguf;
  model->config = config_from_gguf(file);
  for (const TensorView& t : file.tensors()) model->tensors.emplace(t.name, t);
  model->weights = bind_weights(model->config, model->tensors, path);
  if (file.find("tokenizer.chat_template") != nullptr) {
    model->chat_template = file.get_string("tokenizer.chat_template");
  }
  return model;
}

}  // namespace deltaserve::runtime
