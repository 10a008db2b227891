#include "scheduler/prefix_cache.h"

#include <algorithm>
#include <stdexcept>

namespace deltaserve::scheduler {

using runtime::CacheOp;
using runtime::CheckpointRef;
using runtime::CheckpointTier;

namespace {

uint64_t hash_tokens(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids' bytes
  for (const int32_t t : tokens) {
    auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) {
      h ^= (u >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

size_t tier_index(CheckpointTier tier) { return tier == CheckpointTier::kDevice ? 0 : 1; }

}  // namespace

struct PrefixCache::Checkpoint {
  Node* node = nullptr;
  std::vector<int32_t> tail;  // tokens [depth·B, P)
  int32_t partial_block = -1;
  int32_t next_token = -1;
  bool mtp_valid = false;
  CheckpointRef buffer;
  Lru::iterator lru_at;
  uint64_t last_use = 0;
  bool pinned = false;  // taken by an admission in progress: never evicted
  uint64_t prefix_hash = 0;  // of tokens [0, P): its PrefixDirectory entry
};

struct PrefixCache::Node {
  Node* parent = nullptr;
  int32_t depth = 0;                    // full blocks from the root
  int32_t block = -1;                   // the block of [(depth-1)·B, depth·B); -1 at the root
  std::vector<int32_t> tokens;          // that block's tokens
  int32_t next_token = -1;              // the creator's token at depth·B (-1 if none)
  bool mtp_valid = false;               // the creator computed the MTP rows
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Node>>> children;  // by hash_tokens
  std::vector<std::unique_ptr<Checkpoint>> checkpoints;
};

PrefixCache::PrefixCache(int32_t block_tokens, int32_t num_device, int32_t num_host, BlockPool& blocks)
    : block_tokens_(block_tokens), blocks_(blocks), root_(std::make_unique<Node>()) {
  if (block_tokens < 1 || num_device < 0 || num_host < 0) throw std::invalid_argument("PrefixCache: bad sizes");
  for (int32_t i = num_device - 1; i >= 0; --i) free_buffers_[0].push_back(i);
  for (int32_t i = num_host - 1; i >= 0; --i) free_buffers_[1].push_back(i);
}

PrefixCache::~PrefixCache() = default;  // references die with the pool's owner (the Scheduler)

PrefixCache::Lru& PrefixCache::lru(CheckpointTier tier) { return lru_[tier_index(tier)]; }

PrefixCache::Node* PrefixCache::child(const Node& node, std::span<const int32_t> block_tokens) const {
  auto it = node.children.find(hash_tokens(block_tokens));
  if (it == node.children.end()) return nullptr;
  for (const std::unique_ptr<Node>& c : it->second) {
    if (std::equal(c->tokens.begin(), c->tokens.end(), block_tokens.begin(), block_tokens.end())) return c.get();
  }
  return nullptr;
}

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> tokens, int32_t max_tokens, bool need_mtp) const {
  const int32_t b = block_tokens_;
  max_tokens = std::min<int32_t>(max_tokens, static_cast<int32_t>(tokens.size()));
  // The matched path; mtp_ok[d]: the MTP rows of blocks 0..d-1 were computed.
  std::vector<const Node*> path{root_.get()};
  std::vector<bool> mtp_ok{true};
  while ((path.back()->depth + 1) * int64_t{b} <= max_tokens) {
    const Node* next = child(*path.back(), tokens.subspan(static_cast<size_t>(path.back()->depth) * b, static_cast<size_t>(b)));
    if (next == nullptr) break;
    mtp_ok.push_back(mtp_ok.back() && next->mtp_valid);
    path.push_back(next);
  }
  Hit hit;
  for (size_t d = path.size(); d-- > 0 && hit.checkpoint == nullptr;) {
    const Node& node = *path[d];
    const int64_t begin = int64_t{node.depth} * b;
    for (const std::unique_ptr<Checkpoint>& c : node.checkpoints) {
      const int64_t p = begin + static_cast<int64_t>(c->tail.size());
      if (p < 1 || p > max_tokens || p <= hit.num_tokens) continue;
      if (!std::equal(c->tail.begin(), c->tail.end(), tokens.begin() + begin)) continue;
      // The MTP rows must have been computed. A block's last row (and row P-1) pairs with the
      // saver's next token, which may differ from ours: such a row only makes early drafts
      // weaker; the verifier keeps the tokens exact (docs/prefix-cache.md).
      if (need_mtp && !(mtp_ok[d] && c->mtp_valid)) continue;
      hit.num_tokens = static_cast<int32_t>(p);
      hit.checkpoint = c.get();
      hit.partial_block = c->partial_block;
      hit.next_token = c->next_token;
    }
    if (hit.checkpoint == nullptr) continue;
    for (size_t k = 1; k <= d; ++k) hit.blocks.push_back(path[k]->block);
  }
  return hit;
}

void PrefixCache::share_blocks(const Hit& hit, std::vector<int32_t>& kv_blocks) {
  if (hit.checkpoint == nullptr) throw std::logic_error("PrefixCache::share_blocks of a miss");
  for (const int32_t id : hit.blocks) {
    blocks_.block_share(id);
    kv_blocks.push_back(id);
  }
  hit.checkpoint->pinned = true;
}

void PrefixCache::unpin(const Hit& hit) {
  if (hit.checkpoint != nullptr) hit.checkpoint->pinned = false;
}

void PrefixCache::use(const Hit& hit, int32_t slot, int32_t cow_block, std::vector<CacheOp>& ops) {
  if (hit.checkpoint == nullptr || !hit.checkpoint->pinned) throw std::logic_error("PrefixCache::use without share_blocks");
  if (hit.partial_block >= 0) {
    if (cow_block < 0) throw std::logic_error("PrefixCache::use: a partial block needs its copy");
    ops.push_back(CacheOp::copy_block(hit.partial_block, cow_block));
  }
  Checkpoint& c = *hit.checkpoint;
  c.pinned = false;
  ops.push_back(CacheOp::restore(c.buffer, slot));
  Lru& list = lru(c.buffer.tier);
  list.splice(list.end(), list, c.lru_at);
  c.last_use = ++clock_;
}

void PrefixCache::count_query(int32_t num_tokens, int32_t num_hit_tokens, bool preempted) {
  ++(preempted ? stats_.num_preempted_queries : stats_.num_queries);
  (preempted ? stats_.num_preempted_query_tokens : stats_.num_query_tokens) += static_cast<uint64_t>(std::max(0, num_tokens));
  if (num_hit_tokens > 0) {
    ++(preempted ? stats_.num_preempted_hits : stats_.num_hits);
    (preempted ? stats_.num_preempted_hit_tokens : stats_.num_hit_tokens) += static_cast<uint64_t>(num_hit_tokens);
  }
}

// A free buffer, preferring the device tier: spills the device tier's LRU checkpoint to the
// host (evicting the host's LRU when full), or evicts it when there is no host tier.
bool PrefixCache::take_buffer(CheckpointRef& ref, std::vector<CacheOp>& ops) {
  const bool has_device = !free_buffers_[0].empty() || !lru_[0].empty();
  const bool has_host = !free_buffers_[1].empty() || !lru_[1].empty();
  if (has_device && free_buffers_[0].empty()) {
    Checkpoint* victim = lru_[0].front();
    if (has_host) {
      if (free_buffers_[1].empty()) remove(lru_[1].front());
      const CheckpointRef to{CheckpointTier::kHost, free_buffers_[1].back()};
      free_buffers_[1].pop_back();
      ops.push_back(CacheOp::move(victim->buffer, to));
      free_buffers_[0].push_back(victim->buffer.index);
      lru_[0].erase(victim->lru_at);
      victim->buffer = to;
      // Keeps its age: the host list stays ordered by last use.
      auto at = std::find_if(lru_[1].begin(), lru_[1].end(), [&](const Checkpoint* c) { return c->last_use > victim->last_use; });
      victim->lru_at = lru_[1].insert(at, victim);
      --stats_.num_device_checkpoints;
      ++stats_.num_host_checkpoints;
      ++stats_.num_spills;
    } else {
      remove(victim);
    }
  }
  const size_t tier = !free_buffers_[0].empty() ? 0 : 1;
  if (free_buffers_[tier].empty() && tier == 1 && !lru_[1].empty()) remove(lru_[1].front());
  if (free_buffers_[tier].empty()) return false;
  ref = {tier == 0 ? CheckpointTier::kDevice : CheckpointTier::kHost, free_buffers_[tier].back()};
  free_buffers_[tier].pop_back();
  return true;
}

void PrefixCache::save(std::span<const int32_t> tokens, int32_t num_tokens, std::span<const int32_t> kv_blocks,
                       int32_t next_token, bool mtp_valid, int32_t slot, std::vector<CacheOp>& ops) {
  const int32_t b = block_tokens_;
  if (num_tokens < 1 || num_tokens > static_cast<int32_t>(tokens.size()) ||
      static_cast<int64_t>(kv_blocks.size()) < blocks_for_tokens(num_tokens, b))
    throw std::logic_error("PrefixCache::save: the sequence does not hold the prefix");
  if (free_buffers_[0].empty() && free_buffers_[1].empty() && lru_[0].empty() && lru_[1].empty()) return;  // no budget
  const int32_t depth = num_tokens / b;
  const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(depth) * b, static_cast<size_t>(num_tokens - depth * b));
  // An identical checkpoint (same path, same tail) is only refreshed. A saver that computed
  // the MTP rows upgrades what a non-speculative one left (nodes, checkpoint): else a prefix
  // first cached by a request without drafts would never serve a speculative one, and the
  // refreshes would keep it cached for good.
  {
    Node* node = root_.get();
    for (int32_t d = 0; d < depth && node != nullptr; ++d) {
      node = child(*node, tokens.subspan(static_cast<size_t>(d) * b, static_cast<size_t>(b)));
      if (node != nullptr && mtp_valid && !node->mtp_valid) {
        blocks_.block_release(node->block);
        node->block = kv_blocks[static_cast<size_t>(d)];
        blocks_.block_share(node->block);
        const size_t after = static_cast<size_t>(d + 1) * b;
        node->next_token = after < tokens.size() ? tokens[after] : next_token;
        node->mtp_valid = true;
      }
    }
    if (node != nullptr) {
      for (const std::unique_ptr<Checkpoint>& c : node->checkpoints) {
        if (!std::equal(c->tail.begin(), c->tail.end(), tail.begin(), tail.end())) continue;
        if (mtp_valid && !c->mtp_valid) {
          if (c->partial_block >= 0) {
            blocks_.block_release(c->partial_block);
            c->partial_block = kv_blocks[static_cast<size_t>(depth)];
            blocks_.block_share(c->partial_block);
          }
          c->next_token = next_token;
          c->mtp_valid = true;
          ops.push_back(CacheOp::save(slot, c->buffer));  // the same state, now with its MTP row
        }
        Lru& list = lru(c->buffer.tier);
        list.splice(list.end(), list, c->lru_at);
        c->last_use = ++clock_;
        return;
      }
    }
  }
  // The buffer first: taking it may evict checkpoints and prune nodes of this very path.
  CheckpointRef buffer;
  if (!take_buffer(buffer, ops)) return;
  Node* node = root_.get();
  for (int32_t d = 0; d < depth; ++d) {
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(d) * b, static_cast<size_t>(b));
    Node* next = child(*node, block);
    if (next == nullptr) {
      auto created = std::make_unique<Node>();
      created->parent = node;
      created->depth = d + 1;
      created->block = kv_blocks[static_cast<size_t>(d)];
      created->tokens.assign(block.begin(), block.end());
      const size_t after = static_cast<size_t>(d + 1) * b;
      created->next_token = after < tokens.size() ? tokens[after] : next_token;
      created->mtp_valid = mtp_valid;
      blocks_.block_share(created->block);
      next = created.get();
      node->children[hash_tokens(block)].push_back(std::move(created));
      ++stats_.num_nodes;
    }
    node = next;
  }
  auto c = std::make_unique<Checkpoint>();
  c->node = node;
  c->tail.assign(tail.begin(), tail.end());
  if (!tail.empty()) {
    c->partial_block = kv_blocks[static_cast<size_t>(depth)];
    blocks_.block_share(c->partial_block);
  }
  c->next_token = next_token;
  c->mtp_valid = mtp_valid;
  c->buffer = buffer;
  c->last_use = ++clock_;
  c->prefix_hash = prefix_hash(tokens.first(static_cast<size_t>(num_tokens)));
  directory_.add(c->prefix_hash);
  Lru& list = lru(buffer.tier);
  c->lru_at = list.insert(list.end(), c.get());
  ++(buffer.tier == CheckpointTier::kDevice ? stats_.num_device_checkpoints : stats_.num_host_checkpoints);
  ops.push_back(CacheOp::save(slot, buffer));
  node->checkpoints.push_back(std::move(c));
}

void PrefixCache::remove(Checkpoint* c) {
  const size_t tier = tier_index(c->buffer.tier);
  lru_[tier].erase(c->lru_at);
  free_buffers_[tier].push_back(c->buffer.index);
  --(tier == 0 ? stats_.num_device_checkpoints : stats_.num_host_checkpoints);
  ++stats_.num_evictions;
  directory_.remove(c->prefix_hash);
  if (c->partial_block >= 0) blocks_.block_release(c->partial_block);
  Node* node = c->node;
  std::erase_if(node->checkpoints, [c](const std::unique_ptr<Checkpoint>& owned) { return owned.get() == c; });
  prune(node);
}

// Removes `node` and its ancestors while they hold no checkpoint and no child.
void PrefixCache::prune(Node* node) {
  while (node != root_.get() && node->checkpoints.empty() && node->children.empty()) {
    Node* parent = node->parent;
    blocks_.block_release(node->block);
    --stats_.num_nodes;
    const uint64_t key = hash_tokens(node->tokens);
    std::vector<std::unique_ptr<Node>>& siblings = parent->children[key];
    std::erase_if(siblings, [node](const std::unique_ptr<Node>& owned) { return owned.get() == node; });
    if (siblings.empty()) parent->children.erase(key);
    node = parent;
  }
}

bool PrefixCache::evict_lru() {
  Checkpoint* oldest = nullptr;
  for (const Lru& list : lru_) {
    auto it = list.begin();
    while (it != list.end() && (*it)->pinned) ++it;
    if (it != list.end() && (oldest == nullptr || (*it)->last_use < oldest->last_use)) oldest = *it;
  }
  if (oldest == nullptr) return false;
  remove(oldest);
  return true;
}

bool PrefixCache::frees_blocks(const Checkpoint& c) const {
  if (c.partial_block >= 0 && blocks_.block_refs(c.partial_block) == 1) return true;
  // The nodes prune() would remove: c's node while c is its only checkpoint and it has no
  // child, then each parent left with no checkpoint and no other child.
  const Node* node = c.node;
  bool removed = node->checkpoints.size() == 1 && node->children.empty();
  while (removed && node != root_.get()) {
    if (blocks_.block_refs(node->block) == 1) return true;
    const Node* parent = node->parent;
    size_t num_children = 0;
    for (const auto& [key, list] : parent->children) num_children += list.size();
    removed = parent->checkpoints.empty() && num_children == 1;
    node = parent;
  }
  return false;
}

// Two passes, each least recently used first: a checkpoint whose removal alone returns a
// block (the deepest of a preempted sequence's path goes before the earlier ones it shares
// blocks with); else one that references a block no live sequence holds (several checkpoints
// may share such a block, e.g. two tails in one partial block: each must go for it to return).
// A block only the cache holds is referenced by some checkpoint, which the second pass can
// take, so the pool always refills while the cache holds such blocks.
bool PrefixCache::evict_for_blocks() {
  std::vector<int32_t> cache_refs(static_cast<size_t>(blocks_.num_total()), 0);
  count_block_refs(cache_refs);
  auto cache_only = [&](int32_t block) { return blocks_.block_refs(block) <= cache_refs[static_cast<size_t>(block)]; };
  auto uses_cache_only_block = [&](const Checkpoint& c) {
    if (c.partial_block >= 0 && cache_only(c.partial_block)) return true;
    for (const Node* n = c.node; n != root_.get(); n = n->parent) {
      if (cache_only(n->block)) return true;
    }
    return false;
  };
  for (const bool alone : {true, false}) {
    Checkpoint* oldest = nullptr;
    for (const Lru& list : lru_) {
      for (Checkpoint* c : list) {
        if (c->pinned || !(alone ? frees_blocks(*c) : uses_cache_only_block(*c))) continue;
        if (oldest == nullptr || c->last_use < oldest->last_use) oldest = c;
        break;  // the tier's least recently used candidate
      }
    }
    if (oldest != nullptr) {
      remove(oldest);
      return true;
    }
  }
  return false;
}

void PrefixCache::clear() {
  while (evict_lru()) {
  }
}

void PrefixCache::count_block_refs(std::vector<int32_t>& counts) const {
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (node->block >= 0) ++counts[static_cast<size_t>(node->block)];
    for (const std::unique_ptr<Checkpoint>& c : node->checkpoints) {
      if (c->partial_block >= 0) ++counts[static_cast<size_t>(c->partial_block)];
    }
    for (const auto& [key, children] : node->children) {
      for (const std::unique_ptr<Node>& c : children) stack.push_back(c.get());
    }
  }
}

}  // namespace deltaserve::scheduler
