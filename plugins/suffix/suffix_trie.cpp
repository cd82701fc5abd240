#include "suffix_trie.hpp"

#include <algorithm>

#include "tandem/error.hpp"

namespace tandem {

suffix_trie::suffix_trie(int max_depth) : max_depth_(max_depth), nodes_(1) {
  if (max_depth < 2) throw error("suffix_trie: max_depth must be at least 2");
}

int32_t suffix_trie::child(int32_t parent, int32_t token) const {
  auto it = children_.find(key(parent, token));
  return it == children_.end() ? -1 : it->second;
}

int32_t suffix_trie::add_child(int32_t parent, int32_t token) {
  int32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
    nodes_[n] = node{};
  } else {
    n = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  node& x = nodes_[n];
  x.token = token;
  x.parent = parent;
  x.depth = nodes_[parent].depth + 1;
  x.next_sibling = nodes_[parent].first_child;
  if (x.next_sibling >= 0) nodes_[x.next_sibling].prev_sibling = n;
  nodes_[parent].first_child = n;
  children_.emplace(key(parent, token), n);
  return n;
}

// Unlinks a node whose count reached zero (its children have too: they are counted in it).
void suffix_trie::drop(int32_t n) {
  node& x = nodes_[n];
  for (int32_t c = x.first_child; c >= 0;) {
    const int32_t next = nodes_[c].next_sibling;
    drop(c);
    c = next;
  }
  if (x.prev_sibling >= 0) nodes_[x.prev_sibling].next_sibling = x.next_sibling;
  else nodes_[x.parent].first_child = x.next_sibling;
  if (x.next_sibling >= 0) nodes_[x.next_sibling].prev_sibling = x.prev_sibling;
  children_.erase(key(x.parent, x.token));
  x = node{};
  free_.push_back(n);
}

void suffix_trie::append(cursor& c, int32_t token) {
  c.open.push_back(0);  // the path that starts at this token
  ++nodes_[0].count;
  size_t kept = 0;
  for (int32_t at : c.open) {
    int32_t next = child(at, token);
    if (next < 0) next = add_child(at, token);
    ++nodes_[next].count;
    if (nodes_[next].depth < max_depth_) c.open[kept++] = next;
  }
  c.open.resize(kept);
}

void suffix_trie::insert(std::span<const int32_t> tokens) {
  cursor c = begin();
  for (int32_t t : tokens) append(c, t);
}

void suffix_trie::remove_path(std::span<const int32_t> tokens, size_t start) {
  const size_t end = std::min(tokens.size(), start + static_cast<size_t>(max_depth_));
  int32_t at = 0;
  --nodes_[0].count;
  for (size_t i = start; i < end; ++i) {
    const int32_t next = child(at, tokens[i]);
    if (next < 0) throw error("suffix_trie: removing a path that was never indexed");
    if (--nodes_[next].count == 0) {
      drop(next);
      return;
    }
    at = next;
  }
}

void suffix_trie::remove(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) remove_path(tokens, i);
}

suffix_trie::draft_result suffix_trie::walk(int32_t from, int max_tokens, double min_prob) const {
  draft_result out;
  double prob = 1;
  for (int32_t at = from; static_cast<int>(out.tokens.size()) < max_tokens;) {
    int32_t best = -1;
    for (int32_t c = nodes_[at].first_child; c >= 0; c = nodes_[c].next_sibling)
      if (best < 0 || nodes_[c].count > nodes_[best].count ||
          (nodes_[c].count == nodes_[best].count && nodes_[c].token < nodes_[best].token))
        best = c;
    if (best < 0) break;
    prob *= static_cast<double>(nodes_[best].count) / static_cast<double>(nodes_[at].count);
    if (prob < min_prob) break;
    out.tokens.push_back(nodes_[best].token);
    out.score += prob;
    at = best;
  }
  return out;
}

suffix_trie::draft_result suffix_trie::speculate(std::span<const int32_t> context, int max_tokens,
                                                 double spec_factor, double min_prob) const {
  draft_result best;
  const size_t longest = std::min(context.size(), static_cast<size_t>(max_depth_ - 1));
  for (size_t len = 1; len <= longest; ++len) {
    int32_t at = 0;
    for (size_t i = context.size() - len; i < context.size() && at >= 0; ++i) at = child(at, context[i]);
    if (at < 0) break;  // a longer suffix contains this one: it cannot occur either
    const int limit = std::min(max_tokens, static_cast<int>(spec_factor * static_cast<double>(len) + 1e-9));
    draft_result d = walk(at, limit, min_prob);
    if (!d.tokens.empty() && d.score >= best.score) {
      best = std::move(d);
      best.match_length = static_cast<int>(len);
    }
  }
  return best;
}

int64_t suffix_trie::count(std::span<const int32_t> path) const {
  int32_t at = 0;
  for (int32_t t : path) {
    at = child(at, t);
    if (at < 0) return 0;
  }
  return nodes_[at].count;
}

}  // namespace tandem
