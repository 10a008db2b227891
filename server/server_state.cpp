#include "server/server_state.h"

#include <chrono>

namespace deltaserve::server {

ServerState::ServerState(const ServerConfig& config, ServerMetrics& metrics, std::string model_name)
    : config_(config),
      metrics_(metrics),
      model_name_(std::move(model_name)),
      created_unix_s_(std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()),
      response_store_(config.responses_store_entries, config.responses_store_ttl_s,
                      config.responses_store_bytes) {}

void ServerState::publish(const ModelService* service) {
  service_.store(service, std::memory_order_release);
  ServerPhase expected = ServerPhase::Loading;
  phase_.compare_exchange_strong(expected, ServerPhase::Ready, std::memory_order_acq_rel);
}

SchemaLimits ServerState::schema_limits() const {
  SchemaLimits limits;
  limits.max_logprobs = config_.max_logprobs;
  limits.max_stop_strings = config_.max_stop_strings;
  limits.reject_unknown_fields = config_.reject_unknown_fields;
  limits.json = JsonLimits{config_.max_json_depth, config_.max_json_elements};
  if (const ModelService* s = service()) limits.num_vocab = s->codec->num_vocab();
  return limits;
}

}  // namespace deltaserve::server
