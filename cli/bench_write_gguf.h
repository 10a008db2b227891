// `deltaserve bench write-gguf` (bench_write_gguf.cpp says what it writes).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace deltaserve::cli {

struct WriteGgufOptions {
  std::string preset, weights = "q4_0", out_path, tokenizer_path;
  uint64_t seed = 1;  // bench's default seed: the same weights as `bench --preset`
  int threads = 0;
};

void add_write_gguf_options(CLI::App& app, WriteGgufOptions& o);
int write_gguf_main(const WriteGgufOptions& o);

}  // namespace deltaserve::cli
