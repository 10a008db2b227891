// `deltaserve bench write-gguf`: a preset's synthetic weights (the ones `bench --preset` times)
// written as a GGUF file the daemon serves, with the embedded model's tokenizer and chat
// template padded to the preset's vocabulary (runtime/synthetic_gguf.h).
#include "cli/bench_write_gguf.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "runtime/model_preset.h"
#include "runtime/synthetic_gguf.h"
#include "runtime/synthetic_model.h"
#ifdef DELTASERVE_WITH_SERVER
#include "server/default_model.h"
#endif

namespace deltaserve::cli {

void add_write_gguf_options(CLI::App& app, WriteGgufOptions& o) {
  app.add_option("--preset", o.preset, "Model shapes: a built-in preset name (see --list-presets) or a preset .json file")
      ->required();
  app.add_option("--weights,--quant", o.weights, "Synthetic weight type: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the synthetic weights (bench's default gives bench's weights)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads generating the weights (0 = all)")->check(CLI::Range(0, 4096));
  app.add_option("--out", o.out_path, "The GGUF file to write")->required();
  app.add_option("--tokenizer-from", o.tokenizer_path,
                 "A GGUF file whose tokenizer and chat template the file gets (default: the embedded model's)");
}

int write_gguf_main(const WriteGgufOptions& o) {
  std::string tokenizer_path = o.tokenizer_path;
#ifdef DELTASERVE_WITH_SERVER
  if (tokenizer_path.empty()) tokenizer_path = server::find_default_model();
#endif
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "deltaserve bench write-gguf: no embedded model found; give --tokenizer-from FILE.gguf\n");
    return 2;
  }
  try {
    const runtime::ModelPreset preset = runtime::find_preset(o.preset);
    const kernels::DType type = runtime::parse_synthetic_weight_type(o.weights);
    const auto tokenizer = runtime::GgufFile::open(tokenizer_path);
    const auto t0 = std::chrono::steady_clock::now();
    const auto model = runtime::make_synthetic_model(preset.config, type, o.seed, o.threads);
    const auto t1 = std::chrono::steady_clock::now();
    runtime::write_synthetic_gguf(*model, *tokenizer, o.out_path);
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("wrote %s: preset %s, synthetic %s weights (seed %llu), tokenizer of %s; %.2f GB, generated in %.1f s, "
                "written in %.1f s\n",
                o.out_path.c_str(), preset.name.c_str(), o.weights.c_str(), static_cast<unsigned long long>(o.seed),
                tokenizer_path.c_str(), static_cast<double>(std::filesystem::file_size(o.out_path)) / 1e9,
                std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve bench write-gguf: %s\n", e.what());
    return 1;
  }
}

}  // namespace deltaserve::cli
