// What the server needs from a tokenizer + chat template, behind a small interface so the
// HTTP layer tests with a fake. The lead's adapter wraps runtime/tokenizer and server/jinja.
// A TextCodec is const and thread-safe (called from every I/O thread at once); a
// TokenStreamDecoder belongs to one request and is used from its session's strand only.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/grammar/token_mask.h"

namespace deltaserve::server {

// Incremental detokenisation of one request's output: push() returns the text that became
// complete with this token, never a partial UTF-8 character (bytes of an unfinished one
// wait for the next token); finish() returns what is left, replacing invalid bytes with U+FFFD.
class TokenStreamDecoder {
 public:
  virtual ~TokenStreamDecoder() = default;
  virtual std::string push(int32_t token) = 0;
  virtual std::string finish() = 0;
};

// Ordered JSON: templates render schemas with `tojson` in the client's key order.
struct ChatTemplateInput {
  nlohmann::ordered_json messages;  // normalised (chat_messages.h)
  nlohmann::ordered_json tools;     // null or array
  nlohmann::ordered_json kwargs;    // chat_template_kwargs (enable_thinking, ...): an object
  bool add_generation_prompt = true;
};

// A template that fails to render on the request's data (raise_exception in the template,
// missing fields) is the client's problem: the handler answers 400 with this message.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;

  // Text to ids. add_special_tokens: BOS etc. as the model's tokenizer config says.
  // Special-token text in `text` (e.g. "<|im_start|>") is parsed as the special token.
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const = 0;
  // Ids to text; skip_special drops control tokens (EOS, <|im_end|>).
  virtual std::string decode(const std::vector<int32_t>& tokens, bool skip_special) const = 0;
  virtual std::unique_ptr<TokenStreamDecoder> stream_decoder(bool skip_special) const = 0;
  // Renders the model's chat template. Throws TemplateError.
  virtual std::string apply_chat_template(const ChatTemplateInput& input) const = 0;

  virtual std::vector<int32_t> eos_token_ids() const = 0;  // ends generation (stop)
  virtual int64_t num_vocab() const = 0;
  // The token's text as the API reports it in logprobs (raw, special tokens included).
  virtual std::string token_text(int32_t token) const = 0;
  // Every token's bytes for constrained decoding (runtime/grammar): special (control) tokens
  // and unused ids empty, so no grammar ever picks them. Built once, on first use (the
  // walk's sort of the vocabulary); null: this codec cannot constrain output.
  virtual std::shared_ptr<const runtime::grammar::Vocabulary> grammar_vocabulary() const { return nullptr; }
};

}  // namespace deltaserve::server
