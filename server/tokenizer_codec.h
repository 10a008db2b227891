// The real TextCodec: the model's own tokenizer (runtime/tokenizer) and chat template
// (server/jinja), parsed once at load. Const and thread-safe, as TextCodec requires.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"
#include "server/jinja/template.h"
#include "server/text_codec.h"

namespace deltaserve::server {

class TokenizerCodec final : public TextCodec {
 public:
  // Throws std::runtime_error when the template does not parse (a startup error).
  TokenizerCodec(std::unique_ptr<runtime::Tokenizer> tokenizer, const std::string& chat_template);

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& tokens, bool skip_special) const override;
  std::unique_ptr<TokenStreamDecoder> stream_decoder(bool skip_special) const override;
  std::string apply_chat_template(const ChatTemplateInput& input) const override;
  std::vector<int32_t> eos_token_ids() const override { return eos_ids_; }
  int64_t num_vocab() const override { return tokenizer_->num_vocab(); }
  std::string token_text(int32_t token) const override;
  std::shared_ptr<const runtime::grammar::Vocabulary> grammar_vocabulary() const override;

 private:
  std::unique_ptr<runtime::Tokenizer> tokenizer_;
  std::unique_ptr<jinja::Template> template_;
  std::optional<std::string> bos_text_, eos_text_;
  std::vector<int32_t> eos_ids_;
  mutable std::once_flag vocabulary_once_;
  mutable std::shared_ptr<const runtime::grammar::Vocabulary> vocabulary_;
};

// ChatML, for models whose file carries no template (logged as a warning at load).
extern const char* const kFallbackChatTemplate;

}  // namespace deltaserve::server
