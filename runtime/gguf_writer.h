// GGUF writer: the counterpart of gguf_file.h for the files this project makes itself
// (synthetic weights of a preset at its real shapes, so the daemon can serve what `bench`
// times). Writes GGUF v3: header, metadata in the given order, tensor infos, then each
// tensor's bytes at the alignment. Not a converter: tensors are written as they are.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/gguf_file.h"
#include "runtime/tensor_view.h"

namespace deltaserve::runtime {

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

// Metadata values of the types the writer takes (the integer widths GGUF files use).
GgufValue gguf_uint32(uint32_t v);
GgufValue gguf_float32(float v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_string_array(std::vector<std::string> v);
GgufValue gguf_int32_array(const std::vector<int64_t>& v);

// Writes the file (replacing one that exists). Strided tensors (TensorView::slice_stride_bytes)
// are written contiguously. general.alignment is added unless metadata has it. Throws
// std::runtime_error naming the path when it cannot be written, std::invalid_argument for a
// value type the writer does not encode.
void write_gguf(const std::string& path, const GgufMetadata& metadata, const std::vector<TensorView>& tensors,
                size_t alignment = 32);

}  // namespace deltaserve::runtime
