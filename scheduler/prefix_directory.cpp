#include "scheduler/prefix_directory.h"

namespace deltaserve::scheduler {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a over the id's four bytes, continuing from h.
uint64_t hash_step(uint64_t h, int32_t token) {
  const auto u = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i) {
    h ^= (u >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens) {
  std::vector<uint64_t> hashes;
  hashes.reserve(tokens.size());
  uint64_t h = kFnvOffset;
  for (const int32_t t : tokens) {
    h = hash_step(h, t);
    hashes.push_back(h);
  }
  return hashes;
}

uint64_t prefix_hash(std::span<const int32_t> tokens) {
  uint64_t h = kFnvOffset;
  for (const int32_t t : tokens) h = hash_step(h, t);
  return h;
}

void PrefixDirectory::add(uint64_t hash) {
  std::lock_guard lock(mutex_);
  ++counts_[hash];
}

void PrefixDirectory::remove(uint64_t hash) {
  std::lock_guard lock(mutex_);
  const auto it = counts_.find(hash);
  if (it == counts_.end()) return;
  if (--it->second <= 0) counts_.erase(it);
}

int32_t PrefixDirectory::longest_match(std::span<const uint64_t> hashes) const {
  std::lock_guard lock(mutex_);
  if (counts_.empty()) return 0;
  for (size_t p = hashes.size(); p > 0; --p) {
    if (counts_.contains(hashes[p - 1])) return static_cast<int32_t>(p);
  }
  return 0;
}

int32_t PrefixDirectory::size() const {
  std::lock_guard lock(mutex_);
  int32_t n = 0;
  for (const auto& [hash, count] : counts_) n += count;
  return n;
}

}  // namespace deltaserve::scheduler
