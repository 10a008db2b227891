// BPE by merge rank. At every step the adjacent pair with the lowest rank merges, the
// leftmost one on ties: the order of Hugging Face's Word::merge_all (a heap ordered by
// (rank, position)). Short words scan a rank array; long ones use a heap, so an adversarial
// megabyte-long word costs O(n log n), not O(n^2).
#include "runtime/tokenizer/bpe_model.h"

#include <limits>
#include <queue>

#include "runtime/tokenizer/tokenizer_error.h"

namespace deltaserve::runtime {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
constexpr size_t kShortWordSymbols = 96;   // beyond this, merge_long
constexpr size_t kMaxCachedWordBytes = 256;

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& token_bytes,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges)
    : ignore_merges_(ignore_merges) {
  ids_by_bytes_.build(token_bytes);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const int32_t id = ids_by_bytes_.find(std::string_view(&c, 1));
    if (id < 0) {
      throw TokenizerError("byte-level BPE vocabulary lacks a token for byte 0x" +
                           std::to_string(b) + " (decimal)");
    }
    byte_ids_[b] = id;
  }
  std::vector<std::pair<uint64_t, Merge>> table;
  table.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    joined.assign(left).append(right);
    const int32_t l = ids_by_bytes_.find(left), r = ids_by_bytes_.find(right);
    const int32_t m = ids_by_bytes_.find(joined);
    if (l < 0 || r < 0 || m < 0) {
      throw TokenizerError("BPE merge #" + std::to_string(rank) +
                           " names or produces a token that is not in the vocabulary");
    }
    table.emplace_back(pair_key(l, r), Merge{static_cast<int32_t>(rank), m});
  }
  build_merge_table(table);
  whole_word_ = std::vector<std::atomic<uint8_t>>(token_bytes.size());
}

void BpeModel::build_merge_table(const std::vector<std::pair<uint64_t, Merge>>& merges) {
  size_t capacity = 16;
  merge_shift_ = 60;
  while (capacity < merges.size() * 2) {
    capacity *= 2;
    --merge_shift_;
  }
  merge_slots_.assign(capacity, MergeSlot{});
  for (const auto& [key, merge] : merges) {
    size_t i = slot_of(key);
    while (merge_slots_[i].key != kEmptyKey && merge_slots_[i].key != key) i = (i + 1) & (capacity - 1);
    if (merge_slots_[i].key == key) continue;  // listed twice: the lower rank (first) wins
    merge_slots_[i] = {key, merge};
    ++num_merges_;
  }
}

void BpeModel::bpe(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.resize(word.size());
  for (size_t i = 0; i < word.size(); ++i) symbols[i] = byte_ids_[static_cast<uint8_t>(word[i])];
  if (symbols.size() <= kShortWordSymbols) merge_short(symbols);
  else merge_long(symbols);
}

std::optional<int32_t> BpeModel::find(std::string_view bytes) const {
  const int32_t id = ids_by_bytes_.find(bytes);
  if (id < 0) return std::nullopt;
  return id;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (const int32_t id = ids_by_bytes_.find(word); id >= 0) {
    uint8_t whole = whole_word_[id].load(std::memory_order_relaxed);
    if (whole == 0 && !ignore_merges_) {
      std::vector<int32_t> symbols;
      bpe(word, symbols);
      whole = symbols.size() == 1 && symbols[0] == id ? 1 : 2;
      whole_word_[id].store(whole, std::memory_order_relaxed);
    }
    if (ignore_merges_ || whole == 1) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable && cache_.find(word, out)) return;
  std::vector<int32_t> symbols;
  bpe(word, symbols);
  if (cacheable) cache_.insert(word, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::merge_short(std::vector<int32_t>& symbols) const {
  // ranks[i] = rank of the pair (symbols[i], symbols[i + 1]).
  std::vector<int32_t> ranks(symbols.size(), kNoRank);
  std::vector<int32_t> merged(symbols.size(), -1);
  auto refresh = [&](size_t i) {
    const Merge* m = i + 1 < symbols.size() ? find_merge(symbols[i], symbols[i + 1]) : nullptr;
    ranks[i] = m ? m->rank : kNoRank;
    merged[i] = m ? m->merged_id : -1;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) refresh(i);
  while (symbols.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < symbols.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoRank) break;
    symbols[best] = merged[best];
    symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
    merged.erase(merged.begin() + static_cast<ptrdiff_t>(best) + 1);
    refresh(best);
    if (best > 0) refresh(best - 1);
  }
}

void BpeModel::merge_long(std::vector<int32_t>& symbols) const {
  // Doubly linked list over positions; a removed position has id -1.
  const size_t n = symbols.size();
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank, pos, merged_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = find_merge(symbols[pos], symbols[next[pos]])) {
      heap.push({m->rank, pos, m->merged_id});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const int32_t pos = top.pos;
    if (symbols[pos] < 0 || next[pos] < 0) continue;
    const Merge* m = find_merge(symbols[pos], symbols[next[pos]]);
    if (m == nullptr || m->merged_id != top.merged_id || m->rank != top.rank) continue;  // stale
    const int32_t right = next[pos];
    symbols[pos] = top.merged_id;
    symbols[right] = -1;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    push(prev[pos]);
    push(pos);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (symbols[i] >= 0) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

}  // namespace deltaserve::runtime
