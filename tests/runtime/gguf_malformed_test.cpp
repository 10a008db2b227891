// Malformed GGUF files: each must fail load_model() with one clear line naming the file and
// what is wrong, never crash (this suite also runs under ASan/UBSan).
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "runtime/gguf_file.h"
#include "runtime/model_weights.h"
#include "tests/runtime/tiny_gguf_model.h"

namespace deltaserve::runtime {
namespace {

using testing::Bytes;
using testing::GgufWriter;
using testing::TinySpec;

struct MalformedCase {
  const char* name;
  std::function<void(GgufWriter&)> edit_writer;             // before build()
  std::function<void(Bytes&, const GgufWriter::Layout&)> edit_bytes;  // after build()
  const char* expected;  // substring of the error
};

Bytes u64_bytes(uint64_t v) {
  Bytes b;
  testing::put_pod(b, v);
  return b;
}

Bytes array_header(GgufType elem, uint64_t count) {
  Bytes b;
  testing::put_pod<uint32_t>(b, static_cast<uint32_t>(elem));
  testing::put_pod<uint64_t>(b, count);
  return b;
}

void truncate_at(Bytes& b, size_t n) { b.resize(std::min(b.size(), n)); }

const std::vector<MalformedCase>& malformed_cases() {
  using W = GgufWriter&;
  using L = const GgufWriter::Layout&;
  static const std::vector<MalformedCase> cases = {
      {"empty_file", nullptr, [](Bytes& b, L) { b.clear(); }, "truncated header"},
      {"truncated_header", nullptr, [](Bytes& b, L) { truncate_at(b, 10); }, "truncated header"},
      {"truncated_in_metadata", nullptr, [](Bytes& b, L l) { truncate_at(b, l.header_end + 40); }, "truncated"},
      {"truncated_in_tokens_array", nullptr, [](Bytes& b, L l) { truncate_at(b, l.metadata_end - 900); },
       "key 'tokenizer.ggml.tokens' at offset"},
      {"truncated_in_tensor_infos", nullptr, [](Bytes& b, L l) { truncate_at(b, l.infos_end - 4); },
       "tensor 'blk.4.ffn_down.weight' at offset"},
      {"bad_magic", [](W w) { w.magic = "GGUX"; }, nullptr, "bad magic 'GGUX'"},
      {"version_1", [](W w) { w.version = 1; }, nullptr, "unsupported version 1"},
      {"version_4", [](W w) { w.version = 4; }, nullptr, "unsupported version 4"},
      {"absurd_metadata_count", [](W w) { w.num_kv_override = uint64_t{1} << 60; }, nullptr,
       "metadata count 1152921504606846976 cannot fit"},
      {"absurd_tensor_count", [](W w) { w.num_tensors_override = uint64_t{1} << 60; }, nullptr,
       "tensor count 1152921504606846976 cannot fit"},
      {"absurd_string_length", [](W w) { w.add_raw("x.s", GgufType::String, u64_bytes(uint64_t{1} << 60)); },
       nullptr, "truncated string (needs 1152921504606846976 bytes"},
      {"absurd_array_length",
       [](W w) { w.add_raw("x.a", GgufType::Array, array_header(GgufType::String, uint64_t{1} << 60)); },
       nullptr, "array length 1152921504606846976 of string cannot fit"},
      {"unknown_metadata_type", [](W w) { w.add_raw("x.t", static_cast<GgufType>(13), Bytes(8, 0)); }, nullptr,
       "unknown metadata value type 13"},
      {"unknown_array_element_type",
       [](W w) { w.add_raw("x.t", GgufType::Array, array_header(static_cast<GgufType>(77), 1)); }, nullptr,
       "unknown array element type 77"},
      {"nested_array", [](W w) { w.add_raw("x.n", GgufType::Array, array_header(GgufType::Array, 1)); },
       nullptr, "arrays of arrays are not supported"},
      {"bad_bool", [](W w) { w.add_raw("x.b", GgufType::Bool, Bytes{2}); }, nullptr, "bool value 2"},
      {"alignment_zero", [](W w) { w.add_u32("general.alignment", 0); }, nullptr,
       "key 'general.alignment': alignment must be a nonzero power of two, got 0"},
      {"alignment_three", [](W w) { w.add_u32("general.alignment", 3); }, nullptr,
       "nonzero power of two, got 3"},
      {"alignment_not_integer", [](W w) { w.add_string("general.alignment", "32"); }, nullptr,
       "expected an integer, found string"},
      {"duplicate_key", [](W w) { w.add_u32("qwen35.block_count", 5); }, nullptr,
       "duplicate metadata key"},
      {"data_out_of_bounds", nullptr, [](Bytes& b, L) { if (!b.empty()) b.pop_back(); }, "lies outside the file"},
      {"overlapping_tensors", [](W w) { w.tensors[1].offset = 0; }, nullptr, "overlaps tensor"},
      {"misaligned_offset", [](W w) { w.tensors.back().offset = 8; }, nullptr,
       "is not a multiple of the alignment 32"},
      {"unknown_ggml_type", [](W w) { w.tensors[2].ggml_type = 99; }, nullptr, "unknown or unsupported ggml type 99"},
      {"n_dims_zero", [](W w) { w.tensors[1].ne.clear(); }, nullptr, "n_dims 0 is outside 1..4"},
      {"n_dims_five", [](W w) { w.tensors[1].ne = {64, 1, 1, 1, 1}; }, nullptr, "n_dims 5 is outside 1..4"},
      {"ne_zero", [](W w) { w.tensors[0].ne[1] = 0; }, nullptr, "ne[1] = 0 is out of range"},
      {"ne_product_overflow", [](W w) { w.tensors[0].ne = {uint64_t{1} << 32, uint64_t{1} << 32}; }, nullptr,
       "has too many elements"},
      {"ne0_not_multiple_of_block",
       [](W w) {
         w.tensors[0].ggml_type = 8;  // Q8_0, 32 elements a block
         w.tensors[0].ne = {48, 2};
       },
       nullptr, "ne[0] = 48 is not a multiple of the Q8_0 block size 32"},
      {"duplicate_tensor_name", [](W w) { w.tensors[2].name = w.tensors[1].name; }, nullptr,
       "duplicate tensor name"},
      {"empty_tensor_name", [](W w) { w.tensors[2].name = ""; }, nullptr, "empty tensor name"},
      {"missing_tensor", [](W w) { w.remove_tensor("blk.1.ssm_a"); }, nullptr, "tensor 'blk.1.ssm_a': missing"},
      {"missing_mtp_tensor", [](W w) { w.remove_tensor("blk.4.nextn.hnorm.weight"); }, nullptr,
       "tensor 'blk.4.nextn.hnorm.weight': missing"},
      {"wrong_shape",
       [](W w) {
         auto* t = w.find_tensor("blk.3.attn_q.weight");
         t->ne = {64, 64};
         t->data.resize(64 * 64 * 4);
       },
       nullptr, "tensor 'blk.3.attn_q.weight': expected shape {64, 128}, got {64, 64}"},
      {"wrong_type_for_norm",
       [](W w) {
         auto* t = w.find_tensor("blk.0.attn_norm.weight");
         t->ggml_type = 1;  // F16
         t->data.resize(64 * 2);
       },
       nullptr, "tensor 'blk.0.attn_norm.weight': type F16 not allowed (must be F32)"},
      {"unsupported_architecture", [](W w) { w.set_string("general.architecture", "llama"); }, nullptr,
       "unsupported architecture 'llama'"},
      {"missing_hyperparameter", [](W w) { w.remove_key("qwen35.attention.head_count"); }, nullptr,
       "key 'qwen35.attention.head_count': missing"},
      {"hyperparameter_wrong_type", [](W w) { w.set_string("qwen35.block_count", "five"); }, nullptr,
       "key 'qwen35.block_count': expected an integer, found string"},
      {"inconsistent_head_counts", [](W w) { w.set_u32("qwen35.attention.head_count_kv", 3); }, nullptr,
       "num_heads (4) is not a multiple of num_kv_heads (3)"},
      {"inconsistent_ssm_heads", [](W w) { w.set_u32("qwen35.ssm.group_count", 3); }, nullptr,
       "is not a multiple of ssm_k_heads"},
      {"inconsistent_inner_size", [](W w) { w.set_u32("qwen35.ssm.inner_size", 60); }, nullptr,
       "'ssm.inner_size': 60 != time_step_rank"},
      {"absurd_block_count", [](W w) { w.set_u32("qwen35.block_count", 4000000000u); }, nullptr,
       "num_layers = 3999999999 is outside"},
      {"nextn_exceeds_blocks", [](W w) { w.set_u32("qwen35.nextn_predict_layers", 9); }, nullptr,
       "exceeds block_count"},
  };
  return cases;
}

class GgufMalformed : public ::testing::TestWithParam<size_t> {};

TEST_P(GgufMalformed, FailsWithOneClearLine) {
  const MalformedCase& c = malformed_cases()[GetParam()];
  GgufWriter w = testing::make_tiny_gguf({});
  if (c.edit_writer) c.edit_writer(w);
  GgufWriter::Layout layout;
  Bytes bytes = w.build(&layout);
  if (c.edit_bytes) c.edit_bytes(bytes, layout);
  testing::TempDir dir;
  const std::string path = dir.file(std::string(c.name) + ".gguf");
  testing::write_file(path, bytes);
  try {
    load_model(path);
    FAIL() << c.name << ": loaded without error";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << "must start with the path: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "must be one line: " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, GgufMalformed, ::testing::Range<size_t>(0, malformed_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(malformed_cases()[info.param].name);
                         });

// Every truncation point inside header, metadata and tensor infos, and seeded random byte
// flips there: an error or a successful load, never a crash or an out-of-bounds read.
TEST(GgufMalformedFuzz, TruncationsAndByteFlipsNeverCrash) {
  TinySpec spec;
  // A smaller model keeps the 500-odd loads fast (also under ASan).
  spec.V = 8;
  spec.H = 16;
  spec.hd = 8;
  spec.rope = 4;
  spec.d = 4;
  spec.I = 16;
  GgufWriter w = testing::make_tiny_gguf(spec);
  GgufWriter::Layout layout;
  const Bytes good = w.build(&layout);
  testing::TempDir dir;
  const std::string path = dir.file("fuzz.gguf");
  int num_errors = 0;
  auto try_load = [&](const Bytes& bytes) {
    testing::write_file(path, bytes);
    try {
      load_model(path);
    } catch (const std::runtime_error&) {
      ++num_errors;
    }
  };
  for (size_t n = 0; n < layout.infos_end; n += 5) try_load(Bytes(good.begin(), good.begin() + n));
  std::mt19937 rng(42);
  for (int i = 0; i < 300; ++i) {
    Bytes bytes = good;
    const int num_flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < num_flips; ++f) {
      bytes[rng() % layout.infos_end] = static_cast<uint8_t>(rng());
    }
    try_load(bytes);
  }
  EXPECT_GT(num_errors, 0);
}

}  // namespace
}  // namespace deltaserve::runtime
