// KernelTrace (see kernel_trace.h): the kernel class table and the event-pair pool.
#include "runtime/gpu/kernel_trace.h"

#include <array>
#include <cstdarg>
#include <cstring>

namespace deltaserve::runtime::gpu {
namespace {

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }
bool equals(const char* a, const char* b) { return a != nullptr && std::strcmp(a, b) == 0; }

// Segment launches ("%s: %d segments (...)", gpu_ffn_layer.cpp's launch_segments): the group
// names the MoE launches; any other group is a grouped projection (a weight name) or the dense
// FFN's "gate*up".
KernelClass segment_class(const char* group) {
  if (equals(group, "moe router")) return KernelClass::kMoeRouter;
  if (equals(group, "moe gate*up") || equals(group, "moe down")) return KernelClass::kMoeExpertsMatvec;
  return KernelClass::kMatmulMatvec;
}

bool is_lm_head(const char* weight) {
  return equals(weight, "output.weight") || equals(weight, "token_embd.weight") || equals(weight, "lm_head.weight");
}

// Op-name prefixes of the shape formats of runtime/gpu/*.cpp, first match wins (so the longer
// "matmul_..." names come before "matmul ").
struct PrefixRule {
  const char* prefix;
  KernelClass kernel_class;
};
constexpr PrefixRule kRules[] = {
    {"matmul_prefill ", KernelClass::kMatmulTiled},
    {"matmul_experts", KernelClass::kMoeExpertsTiled},
    {"gdn_step", KernelClass::kGdnStep},
    {"gdn_prefill", KernelClass::kGdnPrefill},
    {"paged_attention", KernelClass::kAttentionPaged},
    {"prefill_attention", KernelClass::kAttentionPrefill},
    {"moe_route", KernelClass::kMoeRouter},
    {"moe_group_pairs", KernelClass::kMoeRouter},  // routing work: pairs grouped by expert
    {"moe_combine", KernelClass::kMoeCombine},
    {"moe_down_combine", KernelClass::kMoeDownCombine},
    {"rms_norm", KernelClass::kNorms},
    {"q_norm", KernelClass::kNorms},
    {"k_norm", KernelClass::kNorms},
    {"gated_rms_norm", KernelClass::kNorms},
    {"rope ", KernelClass::kRopeKv},
    {"kv_append", KernelClass::kRopeKv},
    {"swiglu", KernelClass::kElementwise},
    {"expert swiglu", KernelClass::kElementwise},
    {"shared swiglu", KernelClass::kElementwise},
    {"embedding", KernelClass::kEmbedding},
    {"MTP embedding", KernelClass::kEmbedding},
    {"gather ", KernelClass::kGather},
    {"argmax", KernelClass::kArgmax},
    {"draw ", KernelClass::kArgmax},  // sampled rows' draws: the argmax's place for sampled requests
};

// Names in KernelClass order.
constexpr std::array<const char*, kNumKernelClasses> kNames = {
    "embedding",
    "matmul (matvec)",
    "matmul (tiled prefill)",
    "moe router",
    "moe experts (matvec)",
    "moe experts (tiled)",
    "moe combine",
    "moe down + combine",
    "gdn step",
    "gdn prefill (chunked)",
    "attention (paged)",
    "attention (prefill)",
    "norms",
    "rope+kv",
    "elementwise",
    "lm head",
    "gather rows",
    "argmax, draw",
    "other",
};
static_assert(kNames[kNumKernelClasses - 1] != nullptr, "a KernelClass without a name");

// The first argument when the format's first conversion is "%s" ("%%" skipped), else null.
const char* first_string_arg(const char* format, va_list args) {
  for (const char* p = std::strchr(format, '%'); p != nullptr && p[1] != '\0'; p = std::strchr(p + 2, '%')) {
    if (p[1] == '%') continue;
    return p[1] == 's' ? va_arg(args, const char*) : nullptr;
  }
  return nullptr;
}

}  // namespace

KernelClass kernel_class(const char* format, const char* first_arg) {
  if (format == nullptr) return KernelClass::kOther;
  if (starts_with(format, "%s: ")) return segment_class(first_arg);
  if (starts_with(format, "matmul ")) return is_lm_head(first_arg) ? KernelClass::kLmHead : KernelClass::kMatmulMatvec;
  for (const PrefixRule& r : kRules)
    if (starts_with(format, r.prefix)) return r.kernel_class;
  return KernelClass::kOther;
}

const char* kernel_class_name(KernelClass c) {
  const int i = static_cast<int>(c);
  return i >= 0 && i < kNumKernelClasses ? kNames[static_cast<size_t>(i)] : "other";
}

KernelTrace::~KernelTrace() { destroy_events(); }

void KernelTrace::enable() {
  if (enabled_) return;
  grow(kInitialPairs);
  enabled_ = true;
}

void KernelTrace::disable() {
  records_.clear();
  destroy_events();
  enabled_ = false;
}

void KernelTrace::grow(size_t num_pairs) {
  start_.reserve(num_pairs);
  stop_.reserve(num_pairs);
  while (start_.size() < num_pairs) {
    gpuEvent_t a = nullptr, b = nullptr;
    DS_GPU_CHECK(gpuEventCreate(&a), "trace event %zu", start_.size());
    DS_GPU_CHECK(gpuEventCreate(&b), "trace event %zu", start_.size());
    start_.push_back(a);
    stop_.push_back(b);
  }
  records_.reserve(num_pairs);
}

void KernelTrace::destroy_events() {
  for (gpuEvent_t e : start_) (void)gpuEventDestroy(e);
  for (gpuEvent_t e : stop_) (void)gpuEventDestroy(e);
  start_.clear();
  stop_.clear();
}

void KernelTrace::begin(gpuStream_t stream, const char* format, ...) {
  va_list args;
  va_start(args, format);
  const char* first = first_string_arg(format, args);
  va_end(args);
  const KernelClass c = kernel_class(format, first);
  if (records_.size() == start_.size()) grow(2 * start_.size() + 1);
  const size_t i = records_.size();
  records_.push_back({c, 0});
  DS_GPU_CHECK(gpuEventRecord(start_[i], stream), "trace start event %zu", i);
}

void KernelTrace::end(gpuStream_t stream, int64_t num_kernels) {
  const size_t i = records_.size() - 1;
  records_[i].num_kernels = num_kernels;
  DS_GPU_CHECK(gpuEventRecord(stop_[i], stream), "trace stop event %zu", i);
}

std::vector<KernelClassTime> KernelTrace::take(gpuStream_t stream) {
  DS_GPU_CHECK(gpuStreamSynchronize(stream), "trace: %zu launches", records_.size());
  std::array<KernelClassTime, kNumKernelClasses> totals{};
  for (size_t i = 0; i < records_.size(); ++i) {
    float ms = 0;
    DS_GPU_CHECK(gpuEventElapsedTime(&ms, start_[i], stop_[i]), "trace: launch %zu of %zu", i, records_.size());
    KernelClassTime& t = totals[static_cast<size_t>(records_[i].kernel_class)];
    t.num_launches += records_[i].num_kernels;
    ++t.num_calls;
    t.microseconds += 1e3 * static_cast<double>(ms);
  }
  records_.clear();
  std::vector<KernelClassTime> out;
  for (int c = 0; c < kNumKernelClasses; ++c) {
    KernelClassTime& t = totals[static_cast<size_t>(c)];
    if (t.num_calls == 0) continue;
    t.name = kernel_class_name(static_cast<KernelClass>(c));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace deltaserve::runtime::gpu
