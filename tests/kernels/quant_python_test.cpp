// The C++ Q8_0/Q4_0 quantisers against tools/gguf/quants.py, through the fixture that
// tests/tools/test_quants.py writes (and checks it still reproduces): same input floats ->
// same block bytes, same dequantised floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/quant.h"

namespace deltaserve::kernels {
namespace {

constexpr char kFixturePath[] = "tests/fixtures/quants/q8_0_q4_0.bin";

struct Fixture {
  std::vector<float> x, dequant_q8_0, dequant_q4_0;
  std::vector<uint8_t> q8_0, q4_0;
};

// Reads the next `count` items of T; false when the file is too short.
template <class T>
bool take(const std::vector<char>& bytes, size_t& offset, size_t count, std::vector<T>& out) {
  if (bytes.size() - offset < count * sizeof(T)) return false;
  out.resize(count);
  std::memcpy(out.data(), bytes.data() + offset, count * sizeof(T));  // little-endian host
  offset += count * sizeof(T);
  return true;
}

bool load_fixture(Fixture& f) {
  std::ifstream in(kFixturePath, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8 || std::memcmp(bytes.data(), "DSQ1", 4) != 0) return false;
  uint32_t n;
  std::memcpy(&n, bytes.data() + 4, 4);
  size_t offset = 8;
  const size_t num_blocks = n / 32;
  return n % 32 == 0 && take(bytes, offset, n, f.x) && take(bytes, offset, num_blocks * 34, f.q8_0) &&
         take(bytes, offset, num_blocks * 18, f.q4_0) && take(bytes, offset, n, f.dequant_q8_0) &&
         take(bytes, offset, n, f.dequant_q4_0) && offset == bytes.size();
}

// Equal bits, or both NaN (NaN payloads from 0 * inf are the hardware's, not ours).
bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

TEST(PythonQuants, FixtureMatches) {
  Fixture f;
  ASSERT_TRUE(load_fixture(f)) << "missing or malformed " << kFixturePath
                               << " (run from the repository root; regenerate with "
                                  "tests/tools/test_quants.py --write)";
  const int64_t n = static_cast<int64_t>(f.x.size());
  struct Case {
    DType type;
    const std::vector<uint8_t>& expected_bytes;
    const std::vector<float>& expected_values;
  };
  for (const Case& c : {Case{DType::Q8_0, f.q8_0, f.dequant_q8_0}, Case{DType::Q4_0, f.q4_0, f.dequant_q4_0}}) {
    const size_t block_bytes = dtype_traits(c.type).block_bytes;
    std::vector<uint8_t> bytes(dtype_row_bytes(c.type, n));
    quantize_row(c.type, f.x.data(), bytes.data(), n);
    for (size_t i = 0; i < bytes.size(); ++i) {
      ASSERT_EQ(bytes[i], c.expected_bytes[i]) << dtype_name(c.type) << " block " << i / block_bytes
                                               << " byte " << i % block_bytes;
    }
    std::vector<float> values(n);
    dequantize_row(c.type, c.expected_bytes.data(), values.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_float(values[i], c.expected_values[i]))
          << dtype_name(c.type) << " element " << i << ": " << values[i] << " vs " << c.expected_values[i];
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels
