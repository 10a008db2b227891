#include "runtime/tokenizer/streaming_detokenizer.h"

#include "runtime/tokenizer/utf8.h"

namespace deltaserve::runtime {

void StreamingDetokenizer::append_piece(std::string_view piece, std::string& out) {
  if (piece.empty()) return;
  std::string bytes = std::move(pending_);
  pending_.clear();
  bytes.append(piece);
  size_t run = 0, i = 0;  // bytes[run, i) is well-formed and not yet copied
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) { ++i; continue; }
    const utf8::Step st = utf8::next(bytes, i);
    if (st.kind == utf8::StepKind::Valid) { i += st.length; continue; }
    out.append(bytes, run, i - run);
    if (st.kind == utf8::StepKind::Incomplete) {
      pending_.assign(bytes, i, std::string::npos);  // only at the end: < 4 bytes
      return;
    }
    out.append(utf8::kReplacement);
    i += st.length;
    run = i;
  }
  out.append(bytes, run, std::string::npos);
}

std::string StreamingDetokenizer::feed(int32_t id) {
  std::string out;
  if (skip_special_ && tokenizer_->is_special(id)) return out;
  append_piece(tokenizer_->token_to_piece(id), out);
  return out;
}

std::string StreamingDetokenizer::feed(std::span<const int32_t> ids) {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special_ && tokenizer_->is_special(id)) continue;
    append_piece(tokenizer_->token_to_piece(id), out);
  }
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  if (!pending_.empty()) out.append(utf8::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace deltaserve::runtime
