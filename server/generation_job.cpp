#include "server/generation_job.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "server/output_constraint.h"
#include "server/streamed_tags.h"

namespace deltaserve::server {
namespace {

void check_model(const GenerationParams& p, const ServerState& state) {
  if (p.model.empty() || p.model == state.model_name() || state.config().accept_any_model_name) {
    return;
  }
  ApiError e = not_found("model_not_found", "The model '" + p.model + "' does not exist; this "
                                            "server serves '" + state.model_name() + "'.");
  e.param = "model";
  throw ApiException{std::move(e)};
}

int64_t unix_now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Checks the prompt against the context and resolves max_tokens: an explicit value that
// does not fit is a 400 (as vLLM); no value means the API's default (completions: 16) within
// the room left, else up to the context (or the server's default).
int32_t resolve_max_tokens(const GenerationParams& p, size_t num_prompt_tokens,
                           const char* prompt_param, const ServerState& state,
                           const ModelService& service) {
  const int64_t context = service.limits.context_tokens;
  const int64_t prompt = static_cast<int64_t>(num_prompt_tokens);
  if (prompt == 0) {
    throw ApiException{invalid_value(prompt_param, "the prompt is empty after tokenization.")};
  }
  if (prompt >= context) {
    throw ApiException{context_length_exceeded(
        prompt_param, "This model's maximum context length is " + std::to_string(context) +
                          " tokens. However, your " + prompt_param + " resulted in " +
                          std::to_string(prompt) + " tokens.")};
  }
  if (p.max_tokens) {
    if (prompt + *p.max_tokens > context) {
      throw ApiException{context_length_exceeded(
          p.max_tokens_param,
          "This model's maximum context length is " + std::to_string(context) +
              " tokens. However, you requested " + std::to_string(prompt + *p.max_tokens) +
              " tokens (" + std::to_string(prompt) + " in the " + prompt_param + ", " +
              std::to_string(*p.max_tokens) + " in the completion). Please reduce the length "
              "of the " + prompt_param + " or " + p.max_tokens_param + ".")};
    }
    return *p.max_tokens;
  }
  int64_t room = context - prompt;
  if (p.api_default_max_tokens > 0) {
    room = std::min<int64_t>(room, p.api_default_max_tokens);
  } else if (state.config().default_max_tokens > 0) {
    room = std::min<int64_t>(room, state.config().default_max_tokens);
  }
  return static_cast<int32_t>(room);
}

GenerationJob common_job(const GenerationParams& p, std::vector<int32_t> prompt,
                         const char* prompt_param, Endpoint endpoint, const ServerState& state,
                         const ModelService& service) {
  const ServerConfig& config = state.config();
  GenerationJob job;
  job.stream = p.stream;
  job.include_usage = p.stream && (p.include_usage || config.force_include_usage);
  job.continuous_usage = job.include_usage && p.continuous_usage_stats;

  scheduler::RequestSpec& spec = job.spec;
  spec.external_id = make_request_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-");
  spec.max_tokens = resolve_max_tokens(p, prompt.size(), prompt_param, state, service);
  spec.prompt_tokens = std::move(prompt);
  spec.sampling = p.sampling;
  spec.stop_token_ids = p.stop_token_ids;
  if (!p.ignore_eos) {
    for (int32_t eos : service.codec->eos_token_ids()) {
      if (std::find(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), eos) ==
          spec.stop_token_ids.end()) {
        spec.stop_token_ids.push_back(eos);
      }
    }
  }
  // A request may ask for fewer drafts than the server allows, never more (the scheduler
  // caps it by the server's --draft-depth).
  spec.draft_depth = p.draft_depth >= 0 ? p.draft_depth : config.draft_depth;

  GenerationSetup& setup = job.setup;
  setup.num_prompt_tokens = static_cast<int32_t>(spec.prompt_tokens.size());
  setup.max_tokens = spec.max_tokens;
  setup.stop = p.stop;
  setup.include_stop_in_output = p.include_stop_str_in_output;
  setup.stop_token_ids = spec.stop_token_ids;
  setup.skip_special_tokens = p.skip_special_tokens;
  setup.logprobs = p.sampling.logprobs;
  setup.token_ids = p.return_token_ids;

  ResponseFormatter::Setup& format = job.format;
  format.endpoint = endpoint;
  format.id = spec.external_id;
  format.created = unix_now_s();
  format.model = p.model.empty() ? state.model_name() : p.model;
  format.reasoning_field = p.reasoning_field.value_or(
      parse_reasoning_field(config.reasoning_field).value_or(ReasoningField::ReasoningContent));
  format.usage_null_in_chunks = job.include_usage;
  format.logprobs = p.sampling.logprobs;
  format.token_ids = p.return_token_ids;
  if (p.return_token_ids) format.prompt_token_ids = spec.prompt_tokens;
  return job;
}

// The 400 of a template that fails. Qwen's templates take one system message, first, and
// raise on a later one: when the prompt renders without the late system messages, that is
// the cause, and the 400 names the client's message (messages[i] / input[i]) and says what
// to do rather than only quoting the template.
ApiError template_error(const ChatRequest& request, ChatTemplateInput input, const TextCodec& codec,
                        const TemplateError& e) {
  if (!request.late_system_param.empty()) {
    RequestJson kept = RequestJson::array();
    for (size_t i = 0; i < input.messages.size(); ++i) {
      if (i == 0 || input.messages[i].value("role", std::string()) != "system") kept.push_back(input.messages[i]);
    }
    input.messages = std::move(kept);
    try {
      codec.apply_chat_template(input);
      return invalid_value(request.late_system_param,
                           "system (and developer) messages must come first: this model's chat "
                           "template takes one system message, before all other messages, and "
                           "refuses this one after them (the template said: " +
                               std::string(e.what()) + "). Move its text into the first system "
                               "message.");
    } catch (const TemplateError&) {
      // Something else fails too: the template's own message below.
    }
  }
  return invalid_value("messages", std::string("the chat template failed: ") + e.what());
}

}  // namespace

std::string make_request_id(const char* prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

std::string render_chat_prompt(const ChatRequest& request, const ServerState& state,
                               const ModelService& service) {
  ChatTemplateInput input;
  input.messages = request.messages;
  // tool_choice "none": the model is not told about the tools at all (as vLLM does).
  input.tools = request.tool_choice == "none" ? RequestJson(nullptr) : request.tools;
  // The request's kwargs win over the configured defaults (a few keys: the lookups are cheap).
  input.kwargs = request.chat_template_kwargs;
  const nlohmann::json& defaults = state.config().default_chat_template_kwargs;
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    if (!input.kwargs.contains(it.key())) input.kwargs[it.key()] = RequestJson(it.value());
  }
  input.add_generation_prompt = request.add_generation_prompt;
  std::string prompt;
  try {
    prompt = service.codec->apply_chat_template(input);
  } catch (const TemplateError& e) {
    throw ApiException{template_error(request, input, *service.codec, e)};
  }
  if (request.continue_final_message) {
    // The template closes the last message; cut after its content so generation goes on.
    // Templates that trim the content (Qwen3.5's) drop its outer whitespace: then the cut
    // comes after the trimmed content, as in Hugging Face's continue_final_message.
    const std::string last = request.messages.back().value("content", "");
    std::string_view text = last;
    size_t at = text.empty() ? std::string::npos : prompt.rfind(text);
    if (at == std::string::npos) {
      text = trim_layout_space(text);
      at = text.empty() ? std::string::npos : prompt.rfind(text);
    }
    if (at == std::string::npos) {
      throw ApiException{invalid_value("continue_final_message",
                                       "the final message's content was not found in the "
                                       "rendered prompt.")};
    }
    prompt.resize(at + text.size());
  }
  return prompt;
}

GenerationJob prepare_chat(const ChatRequest& request, const ServerState& state,
                           const ModelService& service) {
  check_model(request.params, state);
  const std::string prompt = render_chat_prompt(request, state, service);
  GenerationJob job = common_job(request.params, service.codec->encode(prompt, false), "messages",
                                 Endpoint::Chat, state, service);
  job.setup.split_reasoning = state.config().reasoning_parser == "qwen3";
  job.setup.starts_in_reasoning =
      job.setup.split_reasoning && ReasoningSplitter::prompt_ends_in_reasoning(prompt);
  // response_format / a forced tool call: the sampler masks every token the grammar refuses.
  std::vector<int32_t> end_ids = job.spec.stop_token_ids;
  for (const int32_t eos : service.codec->eos_token_ids()) {
    if (std::find(end_ids.begin(), end_ids.end(), eos) == end_ids.end()) end_ids.push_back(eos);
  }
  job.spec.sampling.constraint = build_output_constraint(
      request, *service.codec, ReasoningSplitter::prompt_ends_in_reasoning(prompt), std::move(end_ids));
  // The model was told about the tools (tool_choice "none" hides them): parse its calls.
  if (request.tools.is_array() && !request.tools.empty() && request.tool_choice != "none") {
    job.setup.parse_tool_calls = true;
    job.setup.tool_param_types = tool_param_types(request.tools);
    const RequestJson& choice = request.tool_choice;
    job.setup.forced_tool_calls =
        choice.is_object() || (choice.is_string() && choice.get_ref<const std::string&>() == "required");
    job.setup.single_tool_call = !request.parallel_tool_calls;
  }
  return job;
}

GenerationJob prepare_completion(const CompletionRequest& request, const ServerState& state,
                                 const ModelService& service) {
  check_model(request.params, state);
  std::vector<int32_t> prompt = request.prompt_tokens
                                    ? *request.prompt_tokens
                                    : service.codec->encode(*request.prompt_text, true);
  return common_job(request.params, std::move(prompt), "prompt", Endpoint::Completion, state,
                    service);
}

}  // namespace deltaserve::server
