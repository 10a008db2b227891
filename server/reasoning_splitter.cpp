#include "server/reasoning_splitter.h"

#include "server/streamed_tags.h"

namespace deltaserve::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

bool ReasoningSplitter::prompt_ends_in_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string_view::npos || close < open;
}

void ReasoningSplitter::emit(Pieces& out, std::string_view text) {
  if (skip_newlines_) {
    const size_t first = text.find_first_not_of("\r\n");
    if (first == std::string_view::npos) return;
    text.remove_prefix(first);
    skip_newlines_ = false;
  }
  (in_reasoning_ ? out.reasoning : out.content).append(text);
}

ReasoningSplitter::Pieces ReasoningSplitter::push(std::string_view text) {
  Pieces out;
  std::string buffer = std::move(held_);
  held_.clear();
  buffer.append(text);
  std::string_view rest = buffer;
  while (!rest.empty()) {
    const std::string_view tag = in_reasoning_ ? kClose : kOpen;
    const size_t at = rest.find(tag);
    if (at != std::string_view::npos) {
      std::string_view before = rest.substr(0, at);
      if (in_reasoning_) {
        const size_t last = before.find_last_not_of("\r\n");
        before = last == std::string_view::npos ? std::string_view() : before.substr(0, last + 1);
      }
      emit(out, before);
      in_reasoning_ = !in_reasoning_;
      skip_newlines_ = true;
      rest.remove_prefix(at + tag.size());
      continue;
    }
    // No complete tag: hold back a partial one, and in reasoning the newlines before it
    // (they are dropped if "</think>" follows).
    size_t keep = partial_tag_suffix(rest, tag);
    if (in_reasoning_) {
      const std::string_view head = rest.substr(0, rest.size() - keep);
      const size_t last = head.find_last_not_of("\r\n");
      keep = rest.size() - (last == std::string_view::npos ? 0 : last + 1);
    }
    emit(out, rest.substr(0, rest.size() - keep));
    held_.assign(rest.substr(rest.size() - keep));
    break;
  }
  return out;
}

ReasoningSplitter::Pieces ReasoningSplitter::finish() {
  Pieces out;
  std::string held = std::move(held_);
  held_.clear();
  // Output cut (max_tokens) while "</think>" was being written, as happens when a thinking
  // budget forces the close just before the limit: the start of the tag, and the layout
  // newlines before it, are markup, not reasoning. A lone "<" may be text, so it stays.
  if (in_reasoning_ && partial_tag_suffix(held, kClose) >= 2) return out;
  emit(out, held);
  return out;
}

}  // namespace deltaserve::server
