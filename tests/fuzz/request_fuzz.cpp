// libFuzzer target: the HTTP body -> typed request parsers of server/openai_schema.h (the
// code every POST body reaches first). The first byte picks the parser; the rest is the
// body. The contract is that any body is either parsed or rejected with ApiException (a
// 400 naming the field); any other exception, a crash or a sanitizer report is a finding.
// Bit 0x40 of the first byte selects tight JSON limits (depth 16, 256 values), so the
// corpus' nesting bombs and huge arrays hit the limits inside the fuzzer's length bound.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltaserve::server;
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  SchemaLimits limits;
  limits.num_vocab = (data[0] & 0x10) ? 5632 : 0;  // with and without a known vocabulary
  limits.reject_unknown_fields = (data[0] & 0x20) == 0;
  if (data[0] & 0x40) limits.json = JsonLimits{16, 256};  // limits reachable within -max_len bytes
  try {
    switch (data[0] % 4) {
      case 0: (void)parse_chat_request(body, limits); break;
      case 1: (void)parse_completion_request(body, limits); break;
      case 2: (void)parse_tokenize_request(body, limits); break;
      default: (void)parse_detokenize_request(body, limits); break;
    }
  } catch (const ApiException& e) {
    if (e.error.status < 400 || e.error.status > 499) __builtin_trap();  // must be a 4xx
    (void)e.error.body_text();  // the error body must serialise (param may hold raw input)
  }
  return 0;
}
