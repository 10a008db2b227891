// Byte-level BPE tokenizer (Qwen's): loaded from Hugging Face's tokenizer.json or from a
// GGUF vocabulary (tokenizer.ggml.*). Pipeline per encode():
//   added tokens matched on the raw text (leftmost-longest) -> each remaining span split
//   into well-formed UTF-8 runs and stray bytes -> NFC (if the tokenizer has it) -> the
//   pre-tokenizer regex (PCRE2, UTF + UCP + JIT) -> BPE by merge rank, cached.
// Stray bytes of ill-formed UTF-8 become their single-byte tokens, so for any bytes s that
// are NFC the tokens' pieces concatenate back to s exactly, and decode(encode(s)) == s for
// valid UTF-8 NFC text (decode() itself replaces ill-formed UTF-8 with U+FFFD).
//
// Ownership and threads: build once at startup (the factories throw TokenizerError), then
// share it as const across any number of threads; every method is thread-safe and none
// blocks beyond a short cache-shard lock. No BOS/EOS is ever added by encode() itself: the
// caller adds BOS when add_bos_token() says so (the model's own metadata: GGUF
// tokenizer.ggml.add_bos_token, tokenizer_config.json add_bos_token; absent = false, as
// Qwen's tokenizers add none); chat templates write special tokens as text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/tokenizer/added_token_matcher.h"
#include "runtime/tokenizer/bpe_model.h"
#include "runtime/tokenizer/regex_splitter.h"
#include "runtime/tokenizer/tokenizer_error.h"

namespace deltaserve::runtime {

class GgufFile;

// Everything a tokenizer is built from, in raw bytes (the GPT-2 byte-to-unicode mapping
// already undone). Loaders fill it; tests can build small ones by hand.
struct TokenizerSpec {
  std::vector<std::string> model_tokens;  // model_tokens[id]; empty = no model token
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;
  std::vector<AddedToken> added_tokens;
  std::string split_pattern;  // Oniguruma dialect (tokenizer.json); empty = no split
  bool nfc = false;
  std::optional<int32_t> bos_id, eos_id, pad_id;
  bool add_bos = false;  // the metadata's add_bos_token
};

class Tokenizer {
 public:
  // tokenizer.json; when a tokenizer_config.json sits beside it, bos/eos/pad come from
  // there (else eos falls back to "<|endoftext|>" if present).
  static std::unique_ptr<Tokenizer> from_json_file(const std::string& path);
  // The same from strings; config_json may be empty.
  static std::unique_ptr<Tokenizer> from_json_string(std::string_view tokenizer_json,
                                                     std::string_view config_json = {});
  // tokenizer.ggml.model must be "gpt2"; tokenizer.ggml.pre selects the split regex
  // ("qwen2" and "qwen35" are known, as llama.cpp hardcodes them). Token types 3 (control)
  // become special added tokens, 4 (user-defined) normal added tokens, 5 (unused) ids
  // that decode to nothing.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);
  static std::unique_ptr<Tokenizer> from_spec(TokenizerSpec spec);

  // Token ids of `text` (any bytes). parse_special == false leaves special tokens as plain
  // text (normal added tokens such as "<think>" are still matched, as in HF and llama.cpp).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Concatenated token bytes, with ill-formed UTF-8 replaced by U+FFFD (as HF does); ids
  // outside [0, num_vocab()) contribute nothing. skip_special hides special tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token (may be part of a UTF-8 character); empty for unknown ids.
  std::string_view token_to_piece(int32_t id) const;
  // Id of an added token by its text ("<|im_end|>", "<think>"), else of the model token
  // with exactly these bytes.
  std::optional<int32_t> token_id(std::string_view piece) const;

  int32_t num_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  bool is_special(int32_t id) const { return valid(id) && (flags_[id] & kSpecial) != 0; }
  bool is_added(int32_t id) const { return valid(id) && (flags_[id] & kAdded) != 0; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  // Whether a prompt encoded "with special tokens" starts with bos_id() (the model's
  // add_bos_token; false when it has no BOS).
  bool add_bos_token() const { return add_bos_ && bos_id_.has_value(); }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  bool has_nfc() const { return nfc_; }
  const RegexSplitter* splitter() const { return splitter_.get(); }

 private:
  explicit Tokenizer(TokenizerSpec spec);
  bool valid(int32_t id) const { return id >= 0 && id < num_vocab(); }
  void encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, bool parse_special,
                         std::vector<int32_t>& out) const;

  static constexpr uint8_t kSpecial = 1, kAdded = 2;
  std::vector<std::string> pieces_;  // bytes by id (model or added)
  std::vector<uint8_t> flags_;
  std::unordered_map<std::string, int32_t> added_ids_;
  BpeModel model_;
  AddedTokenMatcher raw_matcher_;         // tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // tokens with normalized == true
  std::unique_ptr<RegexSplitter> splitter_;
  bool nfc_;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  bool add_bos_ = false;
};

}  // namespace deltaserve::runtime
