#!/usr/bin/env bash
# The main job: installs, builds, and runs the engine. Until the embedded default model
# lands, it generates on the CPU backend from the tiny MoE oracle fixture.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target deltaserve
./build/release/cli/deltaserve inspect tests/fixtures/tiny_moe/model-q8_0.gguf | head -n 30
./build/release/cli/deltaserve run --model tests/fixtures/tiny_moe/model-q8_0.gguf \
  --prompt-ids 1,5,9,13,17,21,25,29 --max-tokens 24
