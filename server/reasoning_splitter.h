// Splits a stream of generated text into thinking text (inside <think>...</think>) and the
// answer, as Qwen3 / Qwen3.5 produce it. Text is pushed in arbitrary pieces; a tag split
// across pieces is held back until it is complete, so no piece of "</think>" ever leaks into
// either side. Qwen3.5's template opens the think block inside the generation prompt when
// enable_thinking is on: the output then starts inside the block with no "<think>" of its
// own (prompt_ends_in_reasoning tells which). Newlines next to the tags are layout, not
// text: those after a tag and those before "</think>" are dropped.
// One per request, used from its session's strand only.
#pragma once

#include <string>
#include <string_view>

namespace deltaserve::server {

class ReasoningSplitter {
 public:
  struct Pieces {
    std::string reasoning;
    std::string content;
    bool empty() const { return reasoning.empty() && content.empty(); }
  };

  explicit ReasoningSplitter(bool starts_in_reasoning)
      : in_reasoning_(starts_in_reasoning), skip_newlines_(starts_in_reasoning) {}

  Pieces push(std::string_view text);
  Pieces finish();  // end of output: release what was held back
  bool in_reasoning() const { return in_reasoning_; }

  // True when the rendered prompt leaves a think block open (its last "<think>" comes after
  // its last "</think>"), i.e. generation starts inside the reasoning.
  static bool prompt_ends_in_reasoning(std::string_view prompt);

 private:
  void emit(Pieces& out, std::string_view text);

  bool in_reasoning_;
  bool skip_newlines_;  // right after a tag: leading newlines are layout
  std::string held_;           // a possible partial tag (and, in reasoning, trailing newlines)
};

}  // namespace deltaserve::server
