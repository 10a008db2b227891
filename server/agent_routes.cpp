#include "server/agent_routes.h"

#include "server/anthropic_request.h"
#include "server/anthropic_wire.h"
#include "server/responses_request.h"
#include "server/responses_wire.h"

namespace deltaserve::server {

bool is_anthropic_path(std::string_view path) {
  path = path.substr(0, path.find('?'));
  return path == "/v1/messages" || path.starts_with("/v1/messages/");
}

GenerationJob prepare_messages(std::string_view body, ServerState& state, const ModelService& service) {
  const ChatRequest chat = parse_anthropic_request(body, state.schema_limits());
  GenerationJob job = prepare_chat(chat, state, service);
  job.spec.external_id = make_request_id("msg_");
  job.format.id = job.spec.external_id;
  job.wire = std::make_shared<AnthropicWire>(job.spec.external_id, job.format.model);
  return job;
}

std::string count_tokens_body(std::string_view body, ServerState& state, const ModelService& service) {
  const ChatRequest chat = parse_anthropic_count_tokens(body, state.schema_limits());
  const size_t num_tokens = service.codec->encode(render_chat_prompt(chat, state, service), false).size();
  return json_text({{"input_tokens", num_tokens}});
}

GenerationJob prepare_responses(std::string_view body, ServerState& state, const ModelService& service) {
  ResponsesRequest request = parse_responses_request(body, state.schema_limits(), state.response_store());
  GenerationJob job = prepare_chat(request.chat, state, service);
  job.spec.external_id = make_request_id("resp_");
  job.format.id = job.spec.external_id;
  ResponsesWire::Setup setup;
  setup.id = job.spec.external_id;
  setup.created_at = job.format.created;
  setup.model = job.format.model;
  setup.echo = std::move(request.echo);
  setup.history = std::move(request.history);
  if (request.store && state.response_store().enabled()) setup.store = &state.response_store();
  job.wire = std::make_shared<ResponsesWire>(std::move(setup));
  return job;
}

}  // namespace deltaserve::server
