// A deterministic byte-level TextCodec for tests and `serve --fake-engine`: ids 0..255 are
// bytes, a few ids above are special tokens with Qwen's spellings. Its chat template is a
// tiny ChatML look-alike whose user turns start with the marker <|user|>, which is what
// FakeEngine echoes back. Const and thread-safe.
#pragma once

#include "server/text_codec.h"

namespace deltaserve::server {

class FakeTextCodec final : public TextCodec {
 public:
  static constexpr int32_t kEndOfText = 256;  // <|endoftext|>  (EOS)
  static constexpr int32_t kImStart = 257;    // <|im_start|>
  static constexpr int32_t kImEnd = 258;      // <|im_end|>     (EOS)
  static constexpr int32_t kThinkOpen = 259;  // <think>        (plain text in output)
  static constexpr int32_t kThinkClose = 260; // </think>       (plain text in output)
  static constexpr int32_t kUser = 261;       // <|user|>       (start of a user turn)
  static constexpr int32_t kNumVocab = 262;

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& tokens, bool skip_special) const override;
  std::unique_ptr<TokenStreamDecoder> stream_decoder(bool skip_special) const override;
  // <|user|>content<|im_end|>\n for user turns, <|im_start|>role\ncontent<|im_end|>\n for
  // the others; generation prompt <|im_start|>assistant\n, then <think>\n when
  // enable_thinking is true or <think>\n\n</think>\n\n when it is false. A message whose
  // content contains "{{raise}}" makes it throw TemplateError (tests the 400 path).
  std::string apply_chat_template(const ChatTemplateInput& input) const override;
  std::vector<int32_t> eos_token_ids() const override { return {kEndOfText, kImEnd}; }
  int64_t num_vocab() const override { return kNumVocab; }
  std::string token_text(int32_t token) const override;
  // Bytes 0..255 and <think> / </think> as their text; the control tokens empty.
  std::shared_ptr<const runtime::grammar::Vocabulary> grammar_vocabulary() const override;

  static bool is_control(int32_t token);  // skipped when skip_special
};

}  // namespace deltaserve::server
