#include "server/generation_state.h"

#include <algorithm>

namespace deltaserve::server {

GenerationState::GenerationState(const TextCodec& codec, GenerationSetup setup)
    : setup_(std::move(setup)),
      decoder_(codec.stream_decoder(setup_.skip_special_tokens)),
      stop_(setup_.stop) {
  if (setup_.split_reasoning) splitter_.emplace(setup_.starts_in_reasoning);
  if (setup_.parse_tool_calls) tool_parser_.emplace(std::move(setup_.tool_param_types), setup_.forced_tool_calls);
  usage_.num_prompt_tokens = setup_.num_prompt_tokens;
}

bool GenerationState::is_stop_token(int32_t token) const {
  return std::find(setup_.stop_token_ids.begin(), setup_.stop_token_ids.end(), token) !=
         setup_.stop_token_ids.end();
}

namespace {

OutputDelta& last_delta(StepOutput& out) { return out.more.empty() ? out.delta : out.more.back(); }

// The delta that may take text of this kind next (see StepOutput::more).
OutputDelta& delta_for_text(StepOutput& out, bool reasoning) {
  OutputDelta& last = last_delta(out);
  const bool ordered = reasoning ? last.content.empty() && last.tool_calls.empty() : last.tool_calls.empty();
  if (ordered) return last;
  out.more.emplace_back();
  return out.more.back();
}

}  // namespace

void GenerationState::put_tool_pieces(StepOutput& out, const ToolCallParser::Pieces& parsed) {
  for (const ToolCallParser::Segment& segment : parsed.segments) {
    if (segment.is_call) {
      append_call_piece(last_delta(out).tool_calls, segment.call);
      if (segment.call.ends && setup_.single_tool_call) {
        single_call_closed_ = true;  // the output ends here: what follows is dropped
        return;
      }
    } else if (!segment.content.empty()) {
      delta_for_text(out, /*reasoning=*/false).content += segment.content;
    }
  }
}

void GenerationState::put_pieces(StepOutput& out, ReasoningSplitter::Pieces pieces) {
  if (single_call_closed_) return;
  if (!pieces.reasoning.empty()) delta_for_text(out, /*reasoning=*/true).reasoning += pieces.reasoning;
  if (!tool_parser_) {
    if (!pieces.content.empty()) delta_for_text(out, /*reasoning=*/false).content += pieces.content;
    return;
  }
  put_tool_pieces(out, tool_parser_->push(pieces.content));
}

void GenerationState::put_text(StepOutput& out, const std::string& text) {
  if (splitter_) {
    put_pieces(out, splitter_->push(text));
  } else {
    ReasoningSplitter::Pieces pieces;
    pieces.content = text;
    put_pieces(out, std::move(pieces));
  }
}

// Text of one token (or the decoder's tail) through the stop matcher and the think split.
void GenerationState::consume_text(const std::string& text, StepOutput& out, bool count_token) {
  const bool was_reasoning = splitter_ && splitter_->in_reasoning();
  runtime::StopStringMatcher::Output r = stop_.feed(text);
  if (r.stopped && setup_.include_stop_in_output) r.text += setup_.stop[static_cast<size_t>(r.stop_index)];
  ReasoningSplitter::Pieces pieces;
  if (splitter_) {
    pieces = splitter_->push(r.text);
  } else {
    pieces.content = std::move(r.text);
  }
  if (count_token && splitter_ &&
      (!pieces.reasoning.empty() || (was_reasoning && pieces.content.empty()))) {
    ++usage_.num_reasoning_tokens;
  }
  put_pieces(out, std::move(pieces));
  if (r.stopped) {
    stop_matched_ = true;
    stop_index_ = r.stop_index;
  }
}

// Normal end: what the decoder, the stop matcher and the splitter still hold goes out,
// unless a stop string matched (then everything held lies after it).
void GenerationState::flush(StepOutput& out) {
  if (single_call_closed_) return;  // nothing after the one call is shown
  if (!stop_matched_) {
    consume_text(decoder_->finish(), out, /*count_token=*/false);
  }
  if (!stop_matched_) put_text(out, stop_.flush());
  if (splitter_) put_pieces(out, splitter_->finish());
  if (tool_parser_) put_tool_pieces(out, tool_parser_->finish());
}

StepOutput GenerationState::on_event(const scheduler::RequestEvent& event) {
  StepOutput out;
  if (done_) return out;
  usage_.num_cached_prompt_tokens = event.num_cached_prompt_tokens;  // the prefix cache's share of the prompt
  const bool engine_ends = event.finish != scheduler::FinishReason::None;
  for (size_t i = 0; i < event.tokens.size(); ++i) {
    if (usage_.num_completion_tokens >= setup_.max_tokens) {
      out.finish_reason = "length";
      break;
    }
    const int32_t token = event.tokens[i];
    ++usage_.num_completion_tokens;
    if (setup_.token_ids) out.delta.token_ids.push_back(token);  // a stop token too: it is counted
    if (is_stop_token(token)) {  // counted, but neither shown nor given logprobs
      out.finish_reason = "stop";
      break;
    }
    if (setup_.logprobs && i < event.logprobs.size()) out.delta.logprobs.push_back(event.logprobs[i]);
    consume_text(decoder_->push(token), out, /*count_token=*/true);
    if (stop_matched_ || single_call_closed_) {
      out.finish_reason = "stop";
      break;
    }
  }
  if (!out.finish_reason && !engine_ends && usage_.num_completion_tokens >= setup_.max_tokens &&
      !event.tokens.empty()) {
    out.finish_reason = "length";
  }
  if (out.finish_reason) {
    // Ended by us: the engine has not finished (or would run past what was shown).
    out.cancel_engine = !engine_ends;
  } else if (engine_ends) {
    switch (event.finish) {
      case scheduler::FinishReason::Stop: out.finish_reason = "stop"; break;
      case scheduler::FinishReason::Length: out.finish_reason = "length"; break;
      case scheduler::FinishReason::Cancelled: out.error = "the request was cancelled"; break;
      case scheduler::FinishReason::Error:
        out.error = event.error.empty() ? "the engine failed on this request" : event.error;
        break;
      case scheduler::FinishReason::None: break;
    }
  }
  if (out.finish_reason) {
    flush(out);
    const bool stopped = std::string_view(out.finish_reason) == "stop";
    if (stopped && tool_parser_ && tool_parser_->num_calls() > 0) {
      out.finish_reason = "tool_calls";
    } else if (stopped && stop_matched_ && stop_index_ >= 0) {
      out.stop_string = setup_.stop[static_cast<size_t>(stop_index_)];
    }
  }
  done_ = out.done();
  return out;
}

}  // namespace deltaserve::server
