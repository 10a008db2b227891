#include "server/output_blocks.h"

namespace deltaserve::server {

void OutputBlocks::close_open(std::vector<BlockEvent>& events) {
  if (!open_) return;
  open_ = false;
  BlockEvent stop;
  stop.type = BlockEvent::Type::Stop;
  stop.index = static_cast<int32_t>(blocks_.size()) - 1;
  stop.kind = blocks_.back().kind;
  events.push_back(std::move(stop));
}

void OutputBlocks::append_text(std::vector<BlockEvent>& events, BlockKind kind,
                               const std::string& text) {
  if (text.empty()) return;
  if (!open_ || blocks_.back().kind != kind) {
    close_open(events);
    blocks_.push_back(OutputBlock{kind, "", {}});
    open_ = true;
    BlockEvent start;
    start.type = BlockEvent::Type::Start;
    start.index = static_cast<int32_t>(blocks_.size()) - 1;
    start.kind = kind;
    events.push_back(std::move(start));
  }
  blocks_.back().text += text;
  BlockEvent delta;
  delta.type = BlockEvent::Type::Delta;
  delta.index = static_cast<int32_t>(blocks_.size()) - 1;
  delta.kind = kind;
  delta.text = text;
  events.push_back(std::move(delta));
}

std::vector<BlockEvent> OutputBlocks::push(const OutputDelta& delta) {
  std::vector<BlockEvent> events;
  append_text(events, BlockKind::Reasoning, delta.reasoning);
  append_text(events, BlockKind::Text, delta.content);
  for (const ToolCall& piece : delta.tool_calls) {
    if (piece.starts) {
      close_open(events);
      ToolCall call = piece;
      call.arguments.clear();
      blocks_.push_back(OutputBlock{BlockKind::ToolCall, "", std::move(call)});
      open_ = true;
      events.push_back(BlockEvent{BlockEvent::Type::Start, static_cast<int32_t>(blocks_.size()) - 1,
                                  BlockKind::ToolCall, ""});
    } else if (!open_ || blocks_.back().kind != BlockKind::ToolCall || blocks_.back().call.index != piece.index) {
      continue;  // a piece of no open call: the parser never emits one
    }
    const auto index = static_cast<int32_t>(blocks_.size()) - 1;
    if (!piece.arguments.empty()) {
      blocks_.back().call.arguments += piece.arguments;
      events.push_back(BlockEvent{BlockEvent::Type::Delta, index, BlockKind::ToolCall, piece.arguments});
    }
    if (piece.ends) close_open(events);
  }
  return events;
}

std::vector<BlockEvent> OutputBlocks::finish() {
  std::vector<BlockEvent> events;
  close_open(events);
  return events;
}

std::vector<OutputBlock> OutputBlocks::of(const OutputDelta& all) {
  OutputBlocks blocks;
  blocks.push(all);
  blocks.finish();
  return blocks.blocks_;
}

std::vector<OutputBlock> OutputBlocks::whole(const OutputDelta& all) {
  (void)finish();
  return blocks_.empty() ? of(all) : blocks_;
}

}  // namespace deltaserve::server
