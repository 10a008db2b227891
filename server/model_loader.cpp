#include "server/model_loader.h"

#include <filesystem>
#include <stdexcept>

#include "runtime/gguf_file.h"
#include "server/fake_engine.h"
#include "server/fake_text_codec.h"

namespace deltaserve::server {

LoadedModel load_fake_model(const ServerConfig& config, scheduler::EngineObserver* observer) {
  FakeEngineConfig fake;
  fake.num_slots = config.max_streams > 0 ? config.max_streams : 8;
  fake.max_waiting = config.max_waiting;
  fake.context_tokens = config.context_tokens > 0 ? config.context_tokens : 4096;
  fake.kv_block_tokens = config.kv_block_tokens;
  const int32_t blocks_per_sequence =
      (fake.context_tokens + fake.kv_block_tokens - 1) / fake.kv_block_tokens;
  fake.num_kv_blocks = config.kv_blocks > 0 ? config.kv_blocks : blocks_per_sequence * fake.num_slots;
  if (fake.num_kv_blocks < blocks_per_sequence) {
    throw std::runtime_error("--kv-blocks " + std::to_string(fake.num_kv_blocks) +
                             " cannot hold one sequence of --context-tokens " +
                             std::to_string(fake.context_tokens) + " (needs " +
                             std::to_string(blocks_per_sequence) + " blocks)");
  }
  fake.step_time = std::chrono::microseconds(config.fake_step_us);
  auto codec = std::make_unique<FakeTextCodec>();
  fake.eos_token_ids = codec->eos_token_ids();
  fake.marker_user = FakeTextCodec::kUser;
  fake.marker_end = FakeTextCodec::kImEnd;

  LoadedModel model;
  auto engine = std::make_unique<FakeEngine>(fake, observer);
  model.limits = engine->limits();
  model.engine = std::move(engine);
  model.codec = std::move(codec);
  return model;
}

void check_model_files(const ServerConfig& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(config.model, ec);
  if (ec || !fs::exists(status)) throw std::runtime_error(config.model + ": no such file or directory");
  if (fs::is_directory(status)) {
    if (!fs::exists(fs::path(config.model) / "config.json")) {
      throw std::runtime_error(config.model + ": a model directory needs config.json");
    }
    return;
  }
  (void)runtime::GgufFile::open(config.model);  // throws naming the file when it is not GGUF
}

LoadedModel load_model(const ServerConfig& config, scheduler::EngineObserver* observer) {
  return load_engine_model(config, observer);
}

}  // namespace deltaserve::server
