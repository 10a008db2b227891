#include "server/output_constraint.h"

#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "runtime/grammar/constraint_grammars.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace deltaserve::server {
namespace {

namespace grammar = runtime::grammar;

// How Qwen3.5's template closes a reasoning block in the history ('\n</think>\n\n' before the
// content): a spent thinking budget forces these bytes, so the answer follows as it would
// after a close the model wrote.
constexpr const char* kReasoningClose = "\n</think>\n\n";

// The grammar the request asks for, or null. Throws SchemaError / GrammarError.
std::shared_ptr<const grammar::Grammar> request_grammar(const ChatRequest& request, std::string& param) {
  const RequestJson& choice = request.tool_choice;
  const bool forced_named = choice.is_object();
  if ((choice.is_string() && choice == "required") || forced_named) {
    param = "tools";
    std::optional<std::string> name;
    if (forced_named) name = choice["function"]["name"].get<std::string>();
    return grammar::tool_call_grammar(request.tools, name, request.parallel_tool_calls);
  }
  const RequestJson& format = request.response_format;
  if (!format.is_object()) return nullptr;
  const std::string type = format.value("type", "text");
  if (type == "json_object") return grammar::json_object_grammar();
  if (type == "json_schema") {
    param = request.response_format_schema_param;
    const RequestJson& json_schema = format["json_schema"];
    const auto strict = json_schema.find("strict");
    return grammar::json_schema_grammar(json_schema["schema"],
                                        strict != json_schema.end() && strict->is_boolean() && strict->get<bool>());
  }
  return nullptr;
}

// Live constraints by what defines them, so concurrent requests with the same schema share
// one mask cache (each distinct grammar state is walked once for all of them). Entries are
// weak: a constraint lives as long as its requests; dead entries are dropped as new ones come.
std::shared_ptr<const grammar::Constraint> shared_constraint(const std::string& key,
                                                             const std::function<std::shared_ptr<const grammar::Constraint>()>& make) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::weak_ptr<const grammar::Constraint>> live;
  std::lock_guard lock(mutex);
  if (const auto it = live.find(key); it != live.end()) {
    if (auto c = it->second.lock()) return c;
  }
  std::erase_if(live, [](const auto& entry) { return entry.second.expired(); });
  auto c = make();  // under the lock: two identical first requests compile once
  live[key] = c;
  return c;
}

}  // namespace

std::shared_ptr<const grammar::Constraint> build_output_constraint(const ChatRequest& request, const TextCodec& codec,
                                                                   bool prompt_ends_in_reasoning,
                                                                   std::vector<int32_t> end_token_ids) {
  // A string compared as std::string: json's operator==(const char*) trips GCC 12's
  // -Warray-bounds at -O3 (a false positive in the temporary json it builds).
  const bool forced_call = request.tool_choice.is_object() ||
                           (request.tool_choice.is_string() && request.tool_choice.get_ref<const std::string&>() == "required");
  const bool json_format = request.response_format.is_object() && request.response_format.value("type", "text") != "text";
  // A thinking budget acts through the constraint's free phase: only when the prompt left
  // the reasoning open (thinking off: nothing to bound).
  const bool budgeted = request.params.sampling.thinking_budget >= 0 && prompt_ends_in_reasoning;
  const bool has_grammar = forced_call || json_format;
  if (!has_grammar && !budgeted) return nullptr;
  std::shared_ptr<const grammar::Vocabulary> vocabulary = codec.grammar_vocabulary();
  if (!vocabulary) {
    const char* param = forced_call ? "tool_choice" : json_format ? "response_format" : "thinking_token_budget";
    throw ApiException{unsupported_value(param, "this model's tokenizer cannot constrain output.")};
  }
  std::string key = forced_call   ? "tools " + request.tool_choice.dump() + (request.parallel_tool_calls ? " parallel " : " one ") +
                                        request.tools.dump()
                    : json_format ? "format " + request.response_format.dump()
                                  : std::string("budget");
  key += prompt_ends_in_reasoning ? " think" : " plain";
  for (const int32_t id : end_token_ids) key += " " + std::to_string(id);
  return shared_constraint(key, [&] {
    std::string param = "response_format";
    std::shared_ptr<const grammar::Grammar> g;
    try {
      if (has_grammar) g = request_grammar(request, param);
    } catch (const grammar::SchemaError& e) {
      throw ApiException{invalid_value(param, std::string("cannot constrain the output to this schema: ") + e.what())};
    } catch (const grammar::GrammarError& e) {
      throw ApiException{invalid_value(param, std::string("cannot constrain the output to this schema: ") + e.what())};
    }
    return std::make_shared<const grammar::Constraint>(std::move(g), std::move(vocabulary), std::move(end_token_ids),
                                                       prompt_ends_in_reasoning ? "</think>" : "",
                                                       prompt_ends_in_reasoning ? kReasoningClose : "");
  });
}

}  // namespace deltaserve::server
