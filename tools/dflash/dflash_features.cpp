// Training data for a DFlash drafter of a GGUF model (tools/dflash/README.md): greedy
// continuations of the given prompts by the target on the CPU backend, with the target layers'
// outputs of every position captured (BatchPlan::capture_layers), and the target's embedding
// table and LM head as f32.
//
//   dflash_features MODEL.gguf PROMPTS OUT_DIR LAYERS [PROMPT_TOKENS GEN_TOKENS THREADS]
//
// PROMPTS: prompt texts separated by NUL bytes; LAYERS: comma-separated trunk layer indices.
// Writes OUT_DIR/tokens.i32 ([N][T]), features.f32 ([N][T][len(LAYERS) * H]), embedding.f32
// and output.f32 ([V][H]) and meta.json (N, T, H, V, layers). Sequences run 16 at a time.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/greedy.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"

using namespace deltaserve;

namespace {

std::vector<float> to_f32(const runtime::TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (int64_t r = 0; r < t.num_rows(); ++r) kernels::dequantize_row(t.type, t.row(r), out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

void write(const std::filesystem::path& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: dflash_features MODEL.gguf PROMPTS OUT_DIR LAYERS [PROMPT_TOKENS GEN_TOKENS THREADS]\n");
    return 2;
  }
  const std::filesystem::path out_dir(argv[3]);
  std::vector<int32_t> layers;
  std::stringstream list(argv[4]);
  for (std::string item; std::getline(list, item, ',');) layers.push_back(std::stoi(item));
  const int32_t prompt_tokens = argc > 5 ? std::stoi(argv[5]) : 32, gen_tokens = argc > 6 ? std::stoi(argv[6]) : 96;
  const int threads = argc > 7 ? std::stoi(argv[7]) : 2;
  const int32_t total = prompt_tokens + gen_tokens;

  const auto model = runtime::load_model(argv[1]);
  const auto tokenizer = runtime::Tokenizer::from_gguf(*model->gguf);
  std::ifstream in(argv[2], std::ios::binary);
  std::vector<std::vector<int32_t>> prompts;
  for (std::string text; std::getline(in, text, '\0');) {
    std::vector<int32_t> ids = tokenizer->encode(text, false);
    if (static_cast<int32_t>(ids.size()) < prompt_tokens) continue;
    ids.resize(static_cast<size_t>(prompt_tokens));
    prompts.push_back(std::move(ids));
  }
  const int64_t h = model->config.num_embd, width = static_cast<int64_t>(layers.size()) * h;
  std::filesystem::create_directories(out_dir);
  std::vector<int32_t> tokens;
  std::vector<float> features;
  constexpr int32_t kBatch = 16;
  const int32_t blocks_per_seq = (total + 15) / 16;
  runtime::CacheConfig cache{kBatch, 16, kBatch * blocks_per_seq, 1};
  runtime::CpuBackend backend(*model, cache, threads);
  runtime::ForwardOutput out;
  for (size_t first = 0; first < prompts.size(); first += kBatch) {
    const size_t n = std::min<size_t>(kBatch, prompts.size() - first);
    std::vector<std::vector<int32_t>> seqs(prompts.begin() + static_cast<int64_t>(first), prompts.begin() + static_cast<int64_t>(first + n));
    std::vector<std::vector<float>> feats(n);
    for (int32_t pos = 0; pos < total;) {
      runtime::BatchPlan plan;
      plan.capture_layers = layers;
      const int32_t rows = pos == 0 ? prompt_tokens : 1;
      for (size_t s = 0; s < n; ++s) {
        runtime::SequenceStep& step = plan.sequences.emplace_back();
        step.slot = static_cast<int32_t>(s);
        step.num_cached_tokens = pos;
        step.tokens.assign(seqs[s].begin() + pos, seqs[s].begin() + pos + rows);
        for (int32_t b = 0; b < blocks_per_seq; ++b) step.kv_blocks.push_back(static_cast<int32_t>(s) * blocks_per_seq + b);
        step.num_logits = 1;
        step.num_hidden = rows;
      }
      backend.forward(plan, out);
      for (size_t s = 0; s < n; ++s) {
        const float* f = out.layer_hidden.data() + out.hidden_begin[s] * width;
        feats[s].insert(feats[s].end(), f, f + rows * width);
        if (pos + rows < total) seqs[s].push_back(out.argmax_ids[static_cast<size_t>(out.logit_begin[s])]);
      }
      pos += rows;
    }
    for (size_t s = 0; s < n; ++s) {
      tokens.insert(tokens.end(), seqs[s].begin(), seqs[s].end());
      features.insert(features.end(), feats[s].begin(), feats[s].end());
    }
    std::fprintf(stderr, "%zu / %zu sequences\n", first + n, prompts.size());
  }
  write(out_dir / "tokens.i32", tokens.data(), tokens.size() * sizeof(int32_t));
  write(out_dir / "features.f32", features.data(), features.size() * sizeof(float));
  const std::vector<float> embedding = to_f32(model->weights.token_embd), output = to_f32(model->weights.output);
  write(out_dir / "embedding.f32", embedding.data(), embedding.size() * sizeof(float));
  write(out_dir / "output.f32", output.data(), output.size() * sizeof(float));
  std::ofstream meta(out_dir / "meta.json");
  meta << "{\"sequences\": " << prompts.size() << ", \"tokens\": " << total << ", \"hidden\": " << h
       << ", \"vocab\": " << model->config.num_vocab << ", \"layers\": [";
  for (size_t i = 0; i < layers.size(); ++i) meta << (i ? ", " : "") << layers[i];
  meta << "]}\n";
  return 0;
}
