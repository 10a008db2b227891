#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>

#include "runtime/tokenizer/unicode_nfc.h"
#include "runtime/tokenizer/utf8.h"

namespace deltaserve::runtime {

std::unique_ptr<Tokenizer> Tokenizer::from_spec(TokenizerSpec spec) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(spec)));
}

namespace {

std::vector<AddedToken> select_added(const std::vector<AddedToken>& all, bool normalized) {
  std::vector<AddedToken> out;
  for (const AddedToken& t : all) {
    if (t.normalized == normalized) out.push_back(t);
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec)
    : model_(spec.model_tokens, spec.merges, spec.ignore_merges),
      raw_matcher_(select_added(spec.added_tokens, false)),
      normalized_matcher_(select_added(spec.added_tokens, true)),
      nfc_(spec.nfc),
      bos_id_(spec.bos_id),
      eos_id_(spec.eos_id),
      pad_id_(spec.pad_id),
      add_bos_(spec.add_bos) {
  size_t num_ids = spec.model_tokens.size();
  for (const AddedToken& t : spec.added_tokens) {
    if (t.id < 0) throw TokenizerError("added token '" + t.content + "' has a negative id");
    if (t.content.empty()) throw TokenizerError("added token " + std::to_string(t.id) + " is empty");
    num_ids = std::max(num_ids, static_cast<size_t>(t.id) + 1);
  }
  pieces_ = std::move(spec.model_tokens);
  pieces_.resize(num_ids);
  flags_.assign(num_ids, 0);
  for (const AddedToken& t : spec.added_tokens) {
    pieces_[t.id] = t.content;
    flags_[t.id] = kAdded | (t.special ? kSpecial : 0);
    added_ids_.try_emplace(t.content, t.id);
  }
  for (auto id : {bos_id_, eos_id_, pad_id_}) {
    if (id && !valid(*id)) throw TokenizerError("bos/eos/pad id " + std::to_string(*id) + " is out of range");
  }
  if (!spec.split_pattern.empty()) splitter_ = std::make_unique<RegexSplitter>(spec.split_pattern);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::vector<AddedTokenMatcher::Segment> segments;
  raw_matcher_.split(text, parse_special, segments);
  for (const auto& seg : segments) {
    if (seg.id >= 0) out.push_back(seg.id);
    else encode_text(seg.text, parse_special, out);
  }
  return out;
}

// Plain text between added tokens: well-formed runs go through normalisation and the
// regex; each stray byte is its own word.
void Tokenizer::encode_text(std::string_view text, bool parse_special,
                            std::vector<int32_t>& out) const {
  size_t run_start = 0, i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) { ++i; continue; }
    const utf8::Step st = utf8::next(text, i);
    if (st.kind == utf8::StepKind::Valid) { i += st.length; continue; }
    if (i > run_start) encode_normalized(text.substr(run_start, i - run_start), parse_special, out);
    for (size_t k = 0; k < st.length; ++k) model_.encode_word(text.substr(i + k, 1), out);
    i += st.length;
    run_start = i;
  }
  if (run_start < text.size()) encode_normalized(text.substr(run_start), parse_special, out);
}

void Tokenizer::encode_normalized(std::string_view text, bool parse_special,
                                  std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_ && !nfc::is_quick_nfc(text)) {
    normalized = nfc::normalize(text);
    text = normalized;
  }
  std::vector<AddedTokenMatcher::Segment> segments;
  if (normalized_matcher_.empty()) segments.push_back({-1, text});
  else normalized_matcher_.split(text, parse_special, segments);
  std::vector<std::string_view> words;
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    words.clear();
    if (splitter_) splitter_->split(seg.text, words);
    else words.push_back(seg.text);
    for (std::string_view w : words) model_.encode_word(w, out);
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (!valid(id) || (skip_special && (flags_[id] & kSpecial))) continue;
    bytes.append(pieces_[id]);
  }
  if (utf8::is_valid(bytes)) return bytes;
  std::string out;
  out.reserve(bytes.size() + 8);
  utf8::append_lossy(out, bytes);
  return out;
}

std::string_view Tokenizer::token_to_piece(int32_t id) const {
  return valid(id) ? std::string_view(pieces_[id]) : std::string_view();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view piece) const {
  if (auto it = added_ids_.find(std::string(piece)); it != added_ids_.end()) return it->second;
  return model_.find(piece);
}

}  // namespace deltaserve::runtime
