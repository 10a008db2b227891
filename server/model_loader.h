// Building what the daemon serves: a TextCodec and a ServingEngine with their limits.
// serve_main calls one of these on its loader thread while /ready answers 503; both throw
// std::runtime_error with a one-line cause when the model cannot be served.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "scheduler/engine_stats.h"
#include "server/server_config.h"
#include "server/replica_engine.h"
#include "server/serving_engine.h"
#include "server/text_codec.h"

namespace deltaserve::server {

struct LoadedModel {
  std::unique_ptr<TextCodec> codec;
  std::unique_ptr<ServingEngine> engine;  // destroyed first (it may call into the rest)
  EngineLimits limits;
  std::vector<EngineLimits> replica_limits;  // --split replicas: each engine's; else empty
  std::shared_ptr<void> resources;  // whatever else must live as long as the engine

  ~LoadedModel() { engine.reset(); }
  LoadedModel() = default;
  LoadedModel(LoadedModel&&) = default;
  LoadedModel& operator=(LoadedModel&&) = default;
};

// Quick checks of --model before the daemon listens: the path exists, a file opens as GGUF
// (header and metadata parse), a directory holds config.json. Throws std::runtime_error with
// a one-line cause; the weights are read later by load_model.
void check_model_files(const ServerConfig& config);

// FakeTextCodec + FakeEngine (`--fake-engine`): sized by max_streams, max_waiting,
// context_tokens, kv_block_tokens, kv_blocks (0s resolved to small defaults).
LoadedModel load_fake_model(const ServerConfig& config, scheduler::EngineObserver* observer);

// The real model behind --model: tokenizer + chat template + scheduler::Engine over the
// runtime backend (load_engine_model, server/engine_loader.cpp).
LoadedModel load_model(const ServerConfig& config, scheduler::EngineObserver* observer);
LoadedModel load_engine_model(const ServerConfig& config, scheduler::EngineObserver* observer);

// --split replicas over config.devices (server/replica_loader.cpp): one engine per device,
// built by load_engine_model or load_fake_model, behind a ReplicaEngine; limits are their sums.
// observer_of(i) observes engine i; routes (may be null) counts the routing decisions.
LoadedModel load_replicas(const ServerConfig& config, const std::function<scheduler::EngineObserver*(int32_t)>& observer_of,
                          RouteObserver* routes);

}  // namespace deltaserve::server
