// Tokenizer factories: Hugging Face tokenizer.json (+ tokenizer_config.json) and GGUF
// (tokenizer.ggml.* as llama.cpp's converter writes them). Both fill a TokenizerSpec in raw
// bytes; the GPT-2 byte-to-unicode mapping is undone here.
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/utf8.h"

namespace deltaserve::runtime {
namespace {

using nlohmann::json;

// Split patterns llama.cpp hardcodes per tokenizer.ggml.pre (written here in the
// tokenizer.json dialect; RegexSplitter translates \s).
constexpr std::string_view kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen35Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// GPT-2's bytes_to_unicode, inverted: code point (< 324) -> byte, -1 where unmapped.
std::array<int16_t, 324> unicode_to_byte_table() {
  std::array<int16_t, 324> table;
  table.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[printable ? b : next++] = static_cast<int16_t>(b);
  }
  return table;
}

// Token text in the byte-level alphabet -> raw bytes. Characters outside the alphabet
// (absent in a well-formed byte-level vocabulary) are kept as their UTF-8.
std::string byte_level_to_bytes(std::string_view text) {
  static const std::array<int16_t, 324> table = unicode_to_byte_table();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8::Step st = utf8::next(text, i);
    if (st.kind == utf8::StepKind::Valid && st.code_point < table.size() && table[st.code_point] >= 0) {
      out.push_back(static_cast<char>(table[st.code_point]));
    } else {
      out.append(text.substr(i, st.length));
    }
    i += st.length;
  }
  return out;
}

std::pair<std::string, std::string> split_merge(std::string_view merge, size_t rank) {
  const size_t space = merge.find(' ');
  if (space == std::string_view::npos || merge.find(' ', space + 1) != std::string_view::npos) {
    const std::string_view shown = merge.substr(0, 64);
    throw TokenizerError("merge #" + std::to_string(rank) + " \"" + std::string(shown) +
                         (shown.size() < merge.size() ? "...\"" : "\"") + " is not of the form \"a b\"");
  }
  return {byte_level_to_bytes(merge.substr(0, space)), byte_level_to_bytes(merge.substr(space + 1))};
}

// model.vocab and model.merges hold ~300k strings: read them with a SAX pass straight into
// the spec instead of building a DOM for them (that halves load time).
class VocabSaxReader : public nlohmann::json_sax<json> {
 public:
  explicit VocabSaxReader(TokenizerSpec& spec) : spec_(spec) {}

  bool key(string_t& k) override {
    if (depth_ <= 2) keys_[depth_] = k;
    else if (in_vocab()) vocab_key_ = k;
    return true;
  }
  bool start_object(std::size_t) override { return enter(); }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override {
    if (in_merges() && depth_ == 3) pair_.clear();
    return enter();
  }
  bool end_array() override {
    if (in_merges() && depth_ == 4) {
      if (pair_.size() != 2) return fail("a merge is not a pair of strings");
      spec_.merges.emplace_back(byte_level_to_bytes(pair_[0]), byte_level_to_bytes(pair_[1]));
    }
    return leave();
  }
  bool string(string_t& v) override {
    if (in_merges() && depth_ == 3) {
      try {
        spec_.merges.push_back(split_merge(v, spec_.merges.size()));
      } catch (const TokenizerError& e) {
        return fail(std::string("model.merges: ") + e.what());
      }
    } else if (in_merges() && depth_ == 4) pair_.push_back(v);
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override { return vocab_entry(static_cast<int64_t>(v)); }
  bool number_integer(number_integer_t v) override { return vocab_entry(v); }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool boolean(bool) override { return true; }
  bool null() override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    throw TokenizerError("tokenizer.json: parse error at byte " + std::to_string(position) + ": " + e.what());
  }

 private:
  bool enter() {
    ++depth_;
    return true;
  }
  bool leave() {
    if (depth_ <= 2) keys_[depth_].clear();
    --depth_;
    return true;
  }
  bool fail(const std::string& what) { throw TokenizerError("tokenizer.json: " + what); }
  bool in_model() const { return depth_ >= 2 && keys_[1] == "model"; }
  bool in_vocab() const { return in_model() && depth_ == 3 && keys_[2] == "vocab"; }
  bool in_merges() const { return in_model() && depth_ >= 3 && keys_[2] == "merges"; }
  bool vocab_entry(int64_t id) {
    if (!in_vocab()) return true;
    if (id < 0 || id > 10'000'000) return fail("vocab id out of range");
    if (static_cast<size_t>(id) >= spec_.model_tokens.size()) spec_.model_tokens.resize(id + 1);
    spec_.model_tokens[id] = byte_level_to_bytes(vocab_key_);
    return true;
  }

  TokenizerSpec& spec_;
  int depth_ = 0;                 // 1 inside the root object
  std::array<std::string, 3> keys_;  // current key at depth 1 and 2
  std::string vocab_key_;
  std::vector<std::string> pair_;
};

// Everything but the vocabulary and merges, as a DOM.
json parse_without_vocab(std::string_view text) {
  const json::parser_callback_t skip_vocab = [](int depth, json::parse_event_t event, json& parsed) {
    return !(event == json::parse_event_t::key && depth == 2 &&
             (parsed == "vocab" || parsed == "merges"));
  };
  return json::parse(text, skip_vocab);
}

void read_model(const json& model, TokenizerSpec& spec) {
  if (!model.is_object() || model.value("type", "") != "BPE") {
    throw TokenizerError("tokenizer.json: only model.type \"BPE\" is supported");
  }
  if (model.value("byte_fallback", false)) {
    throw TokenizerError("tokenizer.json: byte_fallback BPE is not supported (byte-level only)");
  }
  if (model.contains("ignore_merges") && model["ignore_merges"].is_boolean()) {
    spec.ignore_merges = model["ignore_merges"].get<bool>();
  }
}

void read_normalizer(const json& n, TokenizerSpec& spec) {
  if (n.is_null()) return;
  const std::string type = n.value("type", "");
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence") {
    for (const json& inner : n.at("normalizers")) read_normalizer(inner, spec);
  } else {
    throw TokenizerError("tokenizer.json: normalizer \"" + type + "\" is not supported");
  }
}

void read_pre_tokenizer(const json& p, TokenizerSpec& spec) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  auto set_pattern = [&](std::string pattern) {
    if (!spec.split_pattern.empty()) {
      throw TokenizerError("tokenizer.json: more than one regex split is not supported");
    }
    spec.split_pattern = std::move(pattern);
  };
  if (type == "Sequence") {
    for (const json& inner : p.at("pretokenizers")) read_pre_tokenizer(inner, spec);
  } else if (type == "Split") {
    if (p.value("behavior", "") != "Isolated" || p.value("invert", false)) {
      throw TokenizerError("tokenizer.json: only Split with behavior Isolated is supported");
    }
    const json& pattern = p.at("pattern");
    if (pattern.contains("Regex")) set_pattern(pattern["Regex"].get<std::string>());
    else set_pattern("\\Q" + pattern.at("String").get<std::string>() + "\\E");
  } else if (type == "ByteLevel") {
    if (p.value("add_prefix_space", false)) {
      throw TokenizerError("tokenizer.json: ByteLevel add_prefix_space is not supported");
    }
    if (p.value("use_regex", true)) set_pattern(std::string(kGpt2Pattern));
  } else {
    throw TokenizerError("tokenizer.json: pre_tokenizer \"" + type + "\" is not supported");
  }
}

// bos_token / eos_token / pad_token in tokenizer_config.json: a string, null, or
// {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<int32_t> id_of(const TokenizerSpec& spec, const std::string& text) {
  for (const AddedToken& t : spec.added_tokens) {
    if (t.content == text) return t.id;
  }
  for (size_t id = 0; id < spec.model_tokens.size(); ++id) {
    if (spec.model_tokens[id] == text) return static_cast<int32_t>(id);
  }
  return std::nullopt;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json_string(std::string_view tokenizer_json,
                                                       std::string_view config_json) {
  TokenizerSpec spec;
  try {
    const json root = parse_without_vocab(tokenizer_json);
    read_model(root.at("model"), spec);
    VocabSaxReader vocab_reader(spec);
    json::sax_parse(tokenizer_json, &vocab_reader);
    if (spec.model_tokens.empty()) throw TokenizerError("tokenizer.json: model.vocab is empty or missing");
    read_normalizer(root.value("normalizer", json()), spec);
    read_pre_tokenizer(root.value("pre_tokenizer", json()), spec);
    for (const json& a : root.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = a.at("id").get<int32_t>();
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", !t.special);
      spec.added_tokens.push_back(std::move(t));
    }
    if (!config_json.empty()) {
      const json config = json::parse(config_json);
      auto resolve = [&](const char* key) -> std::optional<int32_t> {
        auto text = config_token(config, key);
        return text ? id_of(spec, *text) : std::nullopt;
      };
      spec.bos_id = resolve("bos_token");
      spec.eos_id = resolve("eos_token");
      spec.pad_id = resolve("pad_token");
      if (config.contains("add_bos_token")) {
        if (!config["add_bos_token"].is_boolean()) {
          throw TokenizerError("tokenizer_config.json: add_bos_token must be true or false");
        }
        spec.add_bos = config["add_bos_token"].get<bool>();
      }
    } else {
      spec.eos_id = id_of(spec, "<|endoftext|>");
    }
  } catch (const json::exception& e) {
    throw TokenizerError(std::string("tokenizer.json: ") + e.what());
  }
  return from_spec(std::move(spec));
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_file(const std::string& path) {
  const std::string text = read_file(path);
  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::string config;
  if (std::filesystem::exists(config_path)) config = read_file(config_path.string());
  try {
    return from_json_string(text, config);
  } catch (const TokenizerError& e) {
    throw TokenizerError(path + ": " + e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  const std::string& model = gguf.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw TokenizerError(gguf.path() + ": tokenizer.ggml.model \"" + model +
                         "\" is not supported (byte-level BPE \"gpt2\" only)");
  }
  TokenizerSpec spec;
  const std::string pre = gguf.find("tokenizer.ggml.pre") ? gguf.get_string("tokenizer.ggml.pre") : "default";
  if (pre == "qwen2") spec.split_pattern = kQwen2Pattern;
  else if (pre == "qwen35") spec.split_pattern = kQwen35Pattern;
  else if (pre == "gpt-2" || pre == "gpt2") spec.split_pattern = kGpt2Pattern;
  else throw TokenizerError(gguf.path() + ": tokenizer.ggml.pre \"" + pre + "\" is not supported");
  spec.nfc = pre == "qwen2" || pre == "qwen35";  // Qwen's tokenizer.json normalises to NFC

  const auto& tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types;
  if (gguf.find("tokenizer.ggml.token_type")) types = gguf.get_int_array("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != tokens.size()) {
    throw TokenizerError(gguf.path() + ": tokenizer.ggml.token_type and tokens differ in length");
  }
  spec.model_tokens.resize(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types.empty() ? 1 : types[id];
    // llama.cpp's types: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined,
    // 5 unused, 6 byte. Anything else is a broken file, not a normal token.
    if (type < 0 || type > 6) {
      throw TokenizerError(gguf.path() + ": tokenizer.ggml.token_type[" + std::to_string(id) + "] = " +
                           std::to_string(type) + " is not a token type (0..6)");
    }
    if (type == 3 || type == 4 || type == 2) {  // control, user-defined, unknown
      AddedToken t;
      t.id = static_cast<int32_t>(id);
      t.content = tokens[id];
      t.special = type != 4;
      if (!t.content.empty()) spec.added_tokens.push_back(std::move(t));
    } else if (type != 5) {  // 5 = unused: decodes to nothing
      spec.model_tokens[id] = byte_level_to_bytes(tokens[id]);
    }
  }
  const auto& merges = gguf.get_string_array("tokenizer.ggml.merges");
  spec.merges.reserve(merges.size());
  try {
    for (size_t rank = 0; rank < merges.size(); ++rank) spec.merges.push_back(split_merge(merges[rank], rank));
  } catch (const TokenizerError& e) {
    throw TokenizerError(gguf.path() + ": tokenizer.ggml.merges: " + e.what());
  }

  auto optional_id = [&](const char* key) -> std::optional<int32_t> {
    if (!gguf.find(key)) return std::nullopt;
    const uint64_t id = gguf.get_uint(key);
    if (id >= tokens.size()) return std::nullopt;
    return static_cast<int32_t>(id);
  };
  spec.bos_id = optional_id("tokenizer.ggml.bos_token_id");
  spec.eos_id = optional_id("tokenizer.ggml.eos_token_id");
  spec.pad_id = optional_id("tokenizer.ggml.padding_token_id");
  if (gguf.find("tokenizer.ggml.add_bos_token")) spec.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token");
  try {
    return from_spec(std::move(spec));
  } catch (const TokenizerError& e) {
    throw TokenizerError(gguf.path() + ": " + e.what());
  }
}

}  // namespace deltaserve::runtime
