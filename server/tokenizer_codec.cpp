#include "server/tokenizer_codec.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/tokenizer/streaming_detokenizer.h"
#include "server/jinja/chat_template.h"
#include "server/jinja/template_error.h"

namespace deltaserve::server {

const char* const kFallbackChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

namespace {

class DetokenizerStream final : public TokenStreamDecoder {
 public:
  DetokenizerStream(const runtime::Tokenizer& tokenizer, bool skip_special) : detok_(tokenizer, skip_special) {}
  std::string push(int32_t token) override { return detok_.feed(token); }
  std::string finish() override { return detok_.flush(); }

 private:
  runtime::StreamingDetokenizer detok_;
};

}  // namespace

TokenizerCodec::TokenizerCodec(std::unique_ptr<runtime::Tokenizer> tokenizer, const std::string& chat_template)
    : tokenizer_(std::move(tokenizer)) {
  try {
    template_ = std::make_unique<jinja::Template>(jinja::Template::parse(chat_template));
  } catch (const jinja::TemplateError& e) {
    throw std::runtime_error(std::string("chat template does not parse: ") + e.what());
  }
  auto piece = [&](std::optional<int32_t> id) -> std::optional<std::string> {
    if (!id) return std::nullopt;
    return std::string(tokenizer_->token_to_piece(*id));
  };
  bos_text_ = piece(tokenizer_->bos_id());
  eos_text_ = piece(tokenizer_->eos_id());
  // Generation ends on the tokenizer's EOS and on the chat turn terminators the Qwen family
  // uses (its generation_config lists both <|im_end|> and <|endoftext|>).
  if (tokenizer_->eos_id()) eos_ids_.push_back(*tokenizer_->eos_id());
  for (const char* text : {"<|im_end|>", "<|endoftext|>"}) {
    const std::optional<int32_t> id = tokenizer_->token_id(text);
    if (id && tokenizer_->is_special(*id) && std::find(eos_ids_.begin(), eos_ids_.end(), *id) == eos_ids_.end())
      eos_ids_.push_back(*id);
  }
}

std::vector<int32_t> TokenizerCodec::encode(const std::string& text, bool add_special_tokens) const {
  // BOS exactly when the model's metadata says add_bos_token (Qwen's say false, although
  // llama.cpp's Qwen GGUFs carry a bos id).
  std::vector<int32_t> ids;
  if (add_special_tokens && tokenizer_->add_bos_token()) ids.push_back(*tokenizer_->bos_id());
  const std::vector<int32_t> body = tokenizer_->encode(text, true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::string TokenizerCodec::decode(const std::vector<int32_t>& tokens, bool skip_special) const {
  return tokenizer_->decode(tokens, skip_special);
}

std::unique_ptr<TokenStreamDecoder> TokenizerCodec::stream_decoder(bool skip_special) const {
  return std::make_unique<DetokenizerStream>(*tokenizer_, skip_special);
}

std::string TokenizerCodec::apply_chat_template(const ChatTemplateInput& input) const {
  jinja::ChatTemplateInputs chat;
  chat.messages = input.messages;
  chat.tools = input.tools;
  chat.add_generation_prompt = input.add_generation_prompt;
  if (input.kwargs.is_object()) chat.extra_kwargs = input.kwargs;
  chat.bos_token = bos_text_;
  chat.eos_token = eos_text_;
  try {
    return jinja::render_chat(*template_, chat);
  } catch (const jinja::TemplateError& e) {
    throw TemplateError(e.what());
  }
}

std::shared_ptr<const runtime::grammar::Vocabulary> TokenizerCodec::grammar_vocabulary() const {
  std::call_once(vocabulary_once_, [this] {
    std::vector<std::string> pieces(static_cast<size_t>(tokenizer_->num_vocab()));
    for (int32_t id = 0; id < tokenizer_->num_vocab(); ++id) {
      if (!tokenizer_->is_special(id)) pieces[static_cast<size_t>(id)] = std::string(tokenizer_->token_to_piece(id));
    }
    vocabulary_ = std::make_shared<runtime::grammar::Vocabulary>(std::move(pieces));
  });
  return vocabulary_;
}

std::string TokenizerCodec::token_text(int32_t token) const {
  if (token < 0 || token >= tokenizer_->num_vocab()) return {};
  // The piece's own bytes: a token that is part of a UTF-8 character (byte-level BPE splits
  // emoji and CJK) must report that byte in logprobs' `bytes`, so clients can join them.
  return std::string(tokenizer_->token_to_piece(token));
}

}  // namespace deltaserve::server
