#include "server/fake_text_codec.h"

#include <array>
#include <string_view>

#include "server/utf8.h"

namespace deltaserve::server {
namespace {

struct Special {
  int32_t id;
  std::string_view text;
};

constexpr std::array<Special, 6> kSpecials = {{
    {FakeTextCodec::kEndOfText, "<|endoftext|>"},
    {FakeTextCodec::kImStart, "<|im_start|>"},
    {FakeTextCodec::kImEnd, "<|im_end|>"},
    {FakeTextCodec::kThinkOpen, "<think>"},
    {FakeTextCodec::kThinkClose, "</think>"},
    {FakeTextCodec::kUser, "<|user|>"},
}};

class FakeStreamDecoder final : public TokenStreamDecoder {
 public:
  explicit FakeStreamDecoder(bool skip_special) : skip_special_(skip_special) {}

  std::string push(int32_t token) override {
    if (token >= 0 && token < 256) {
      pending_.push_back(static_cast<char>(token));
      return take_complete();
    }
    if (skip_special_ && FakeTextCodec::is_control(token)) return {};
    // A special token ends any unfinished character: what is pending is invalid.
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    for (const Special& s : kSpecials) {
      if (s.id == token) out += s.text;
    }
    return out;
  }

  std::string finish() override {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
  }

 private:
  std::string take_complete() {
    const size_t n = utf8_complete_prefix(pending_);
    std::string out = sanitize_utf8(std::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
    return out;
  }

  bool skip_special_;
  std::string pending_;  // bytes of a character not finished yet
};

}  // namespace

bool FakeTextCodec::is_control(int32_t token) {
  return token == kEndOfText || token == kImStart || token == kImEnd || token == kUser;
}

std::vector<int32_t> FakeTextCodec::encode(const std::string& text, bool) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    bool matched = false;
    for (const Special& s : kSpecials) {
      if (std::string_view(text).substr(i, s.text.size()) == s.text) {
        ids.push_back(s.id);
        i += s.text.size();
        matched = true;
        break;
      }
    }
    if (!matched) ids.push_back(static_cast<unsigned char>(text[i++]));
  }
  return ids;
}

std::string FakeTextCodec::decode(const std::vector<int32_t>& tokens, bool skip_special) const {
  FakeStreamDecoder decoder(skip_special);
  std::string out;
  for (int32_t t : tokens) out += decoder.push(t);
  return out + decoder.finish();
}

std::unique_ptr<TokenStreamDecoder> FakeTextCodec::stream_decoder(bool skip_special) const {
  return std::make_unique<FakeStreamDecoder>(skip_special);
}

std::string FakeTextCodec::apply_chat_template(const ChatTemplateInput& input) const {
  std::string out;
  for (const nlohmann::ordered_json& m : input.messages) {
    const std::string role = m.value("role", "");
    const std::string content = m.value("content", "");
    if (content.find("{{raise}}") != std::string::npos) {
      throw TemplateError("the chat template raised an exception: content asked for it");
    }
    if (role == "user") {
      out += "<|user|>" + content + "<|im_end|>\n";
    } else {
      out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
    }
  }
  if (input.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    const auto thinking = input.kwargs.find("enable_thinking");
    if (thinking != input.kwargs.end() && thinking->is_boolean()) {
      out += thinking->get<bool>() ? "<think>\n" : "<think>\n\n</think>\n\n";
    }
  }
  return out;
}

std::shared_ptr<const runtime::grammar::Vocabulary> FakeTextCodec::grammar_vocabulary() const {
  static const auto vocabulary = [] {
    std::vector<std::string> pieces(kNumVocab);
    for (int32_t id = 0; id < kNumVocab; ++id) {
      if (!is_control(id)) pieces[static_cast<size_t>(id)] = FakeTextCodec().token_text(id);
    }
    return std::make_shared<const runtime::grammar::Vocabulary>(std::move(pieces));
  }();
  return vocabulary;
}

std::string FakeTextCodec::token_text(int32_t token) const {
  if (token >= 0 && token < 256) return std::string(1, static_cast<char>(token));
  for (const Special& s : kSpecials) {
    if (s.id == token) return std::string(s.text);
  }
  return {};
}

}  // namespace deltaserve::server
