#include "server/agent_routes.h"

#include <algorithm>
#include <vector>

#include "server/anthropic_request.h"
#include "server/anthropic_wire.h"
#include "server/responses_request.h"
#include "server/responses_wire.h"

namespace deltaserve::server {
namespace {

// The input items of a Responses request as OpenAI lists them: every item typed, with an id
// (the client's, else a new one) and a status; message content as parts.
nlohmann::json input_items(const RequestJson& input) {
  nlohmann::json items = nlohmann::json::array();
  if (input.is_string()) {
    items.push_back({{"id", make_request_id("msg_")}, {"type", "message"}, {"role", "user"},
                     {"content", nlohmann::json::array({{{"type", "input_text"}, {"text", input.get<std::string>()}}})},
                     {"status", "completed"}});
    return items;
  }
  for (const RequestJson& in : input) {
    nlohmann::json item = nlohmann::json::parse(in.dump());
    const std::string type = item.value("type", "message");
    item["type"] = type;
    if (!item.contains("id") || !item["id"].is_string()) {
      item["id"] = make_request_id(type == "message"         ? "msg_"
                                   : type == "function_call" ? "fc_"
                                   : type == "reasoning"     ? "rs_"
                                                             : "fco_");
    }
    if (type == "message" && item["content"].is_string()) {
      const char* part = item["role"] == "assistant" ? "output_text" : "input_text";
      item["content"] = nlohmann::json::array({{{"type", part}, {"text", item["content"]}}});
    }
    if (type != "reasoning" && !item.contains("status")) item["status"] = "completed";
    items.push_back(std::move(item));
  }
  return items;
}

ApiException response_not_found(const std::string& id) {
  return ApiException{not_found("", "Response with id '" + id + "' not found.")};
}

ResponseStore::Stored stored_or_404(const std::string& id, ServerState& state) {
  std::optional<ResponseStore::Stored> stored = state.response_store().find(id);
  if (!stored) throw response_not_found(id);
  return std::move(*stored);
}

const std::string* query_value(const QueryParams& query, const char* key) {
  const auto it = query.find(key);
  return it == query.end() ? nullptr : &it->second;
}

}  // namespace

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
  setup.input_items = std::move(request.previous_items);  // the chain's items, then this request's input
  for (nlohmann::json& item : input_items(request.input)) setup.input_items.push_back(std::move(item));
  if (request.store && state.response_store().enabled()) setup.store = &state.response_store();
  job.wire = std::make_shared<ResponsesWire>(std::move(setup));
  return job;
}

std::string stored_response_body(const std::string& id, const QueryParams& query, ServerState& state) {
  if (const std::string* stream = query_value(query, "stream"); stream && *stream != "false") {
    throw ApiException{unsupported_value("stream", "streaming a stored response again is not supported; "
                                                   "GET without stream returns it whole.")};
  }
  return stored_or_404(id, state).response_json;
}

std::string deleted_response_body(const std::string& id, ServerState& state) {
  if (!state.response_store().erase(id)) throw response_not_found(id);
  return json_text({{"id", id}, {"object", "response"}, {"deleted", true}});
}

std::string input_items_body(const std::string& id, const QueryParams& query, ServerState& state) {
  int limit = 20;
  if (const std::string* v = query_value(query, "limit")) {
    const bool digits = !v->empty() && v->size() <= 3 && v->find_first_not_of("0123456789") == std::string::npos;
    limit = digits ? std::stoi(*v) : 0;
    if (limit < 1 || limit > 100) throw ApiException{invalid_value("limit", "expected an integer from 1 to 100.")};
  }
  const std::string* order_value = query_value(query, "order");
  const std::string order = order_value ? *order_value : "desc";
  if (order != "asc" && order != "desc") throw ApiException{invalid_value("order", "expected 'asc' or 'desc'.")};
  const ResponseStore::Stored stored = stored_or_404(id, state);
  std::vector<const nlohmann::json*> items;
  for (const nlohmann::json& item : stored.input_items) items.push_back(&item);
  if (order == "desc") std::reverse(items.begin(), items.end());
  size_t begin = 0;
  if (const std::string* after = query_value(query, "after")) {
    while (begin < items.size() && items[begin]->value("id", std::string()) != *after) ++begin;
    if (begin == items.size()) {
      throw ApiException{invalid_value("after", "no input item with id '" + *after + "' in response '" + id + "'.")};
    }
    ++begin;
  }
  const size_t end = std::min(items.size(), begin + static_cast<size_t>(limit));
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = begin; i < end; ++i) data.push_back(*items[i]);
  const nlohmann::json first_id = data.empty() ? nlohmann::json() : data.front()["id"];
  const nlohmann::json last_id = data.empty() ? nlohmann::json() : data.back()["id"];
  return json_text({{"object", "list"}, {"data", std::move(data)}, {"first_id", first_id}, {"last_id", last_id},
                    {"has_more", end < items.size()}});
}

}  // namespace deltaserve::server
