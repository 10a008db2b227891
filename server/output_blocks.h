// The output of one generation as an ordered list of blocks (thinking, text, tool call), the
// shape both agent APIs speak: Anthropic's content blocks and the Responses API's output
// items. Fed the same OutputDeltas the chat stream gets (one pipeline, three wire formats),
// it says when a block starts, grows and ends, so a stream can open and close its blocks in
// order. Within one delta the order is reasoning, content, tool calls (the think split ends
// before the answer; the tool-call parser releases the text before a call first).
// A tool call is one block: started by its first piece, filled by its arguments fragments,
// stopped by its last piece (a whole call does all three at once).
// One per request, used from its session's strand only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_response.h"

namespace deltaserve::server {

enum class BlockKind { Reasoning, Text, ToolCall };

struct OutputBlock {
  BlockKind kind = BlockKind::Text;
  std::string text;  // Reasoning / Text: the whole text so far
  ToolCall call;     // ToolCall only: arguments so far
};

struct BlockEvent {
  enum class Type { Start, Delta, Stop };
  Type type = Type::Start;
  int32_t index = 0;  // the block's position in the output: 0, 1, ...
  BlockKind kind = BlockKind::Text;
  std::string text;   // Delta: the new text (a fragment of a call's arguments)
};

class OutputBlocks {
 public:
  std::vector<BlockEvent> push(const OutputDelta& delta);
  std::vector<BlockEvent> finish();  // end of output: closes the open block
  const std::vector<OutputBlock>& blocks() const { return blocks_; }

  // The blocks of a whole (non-streamed) output, in the order a stream would give them.
  static std::vector<OutputBlock> of(const OutputDelta& all);
  // A non-streamed body's blocks: those of the deltas pushed so far (closed), which keep the
  // order of text and tool calls; when none was pushed, of(all).
  std::vector<OutputBlock> whole(const OutputDelta& all);

 private:
  void append_text(std::vector<BlockEvent>& events, BlockKind kind, const std::string& text);
  void close_open(std::vector<BlockEvent>& events);

  std::vector<OutputBlock> blocks_;
  bool open_ = false;  // the last block still takes text
};

}  // namespace deltaserve::server
