// What every session shares: the config, the metrics, the lifecycle phase and (once loaded)
// the model service. Created by serve_main before the listener; outlives every session.
// Thread-safety: config and metrics are safe from any thread; the phase is atomic; the
// service is published once with release/acquire and never changes afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/responses_store.h"
#include "server/server_config.h"
#include "server/serving_engine.h"
#include "server/text_codec.h"

namespace deltaserve::server {

// The loaded model as the HTTP layer sees it. Owned by serve_main.
struct ModelService {
  ServingEngine* engine = nullptr;
  const TextCodec* codec = nullptr;
  EngineLimits limits;
};

enum class ServerPhase { Loading, Ready, Draining };

class ServerState {
 public:
  ServerState(const ServerConfig& config, ServerMetrics& metrics, std::string model_name);

  const ServerConfig& config() const { return config_; }
  ServerMetrics& metrics() { return metrics_; }
  const std::string& model_name() const { return model_name_; }
  int64_t created_unix_s() const { return created_unix_s_; }

  ServerPhase phase() const { return phase_.load(std::memory_order_acquire); }
  // Loading -> Ready, once; `service` must outlive the server.
  void publish(const ModelService* service);
  void begin_drain() { phase_.store(ServerPhase::Draining, std::memory_order_release); }
  // Null while loading.
  const ModelService* service() const { return service_.load(std::memory_order_acquire); }
  // Parser limits: from the config, plus the vocabulary once the model is loaded.
  SchemaLimits schema_limits() const;

  // Generations whose response is not fully written yet (for the drain at shutdown).
  void generation_started() { num_active_.fetch_add(1, std::memory_order_relaxed); }
  void generation_ended() { num_active_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t num_active_generations() const { return num_active_.load(std::memory_order_relaxed); }

  // /v1/responses' previous_response_id store (thread-safe).
  ResponseStore& response_store() { return response_store_; }

 private:
  const ServerConfig& config_;
  ServerMetrics& metrics_;
  const std::string model_name_;
  const int64_t created_unix_s_;
  std::atomic<ServerPhase> phase_{ServerPhase::Loading};
  std::atomic<const ModelService*> service_{nullptr};
  std::atomic<int64_t> num_active_{0};
  ResponseStore response_store_;
};

}  // namespace deltaserve::server
