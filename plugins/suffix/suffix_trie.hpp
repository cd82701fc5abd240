#pragma once
// suffix_trie: a depth-bounded suffix tree with occurrence counts, as SuffixDecoding
// (arXiv 2411.04975) and ArcticInference build theirs. For every start position i of the
// indexed token strings it holds the path tokens[i, i + max_depth); a node's count is the
// number of paths through it, i.e. how often that substring (of length <= max_depth) occurs.
//
//   suffix_trie t(24);
//   auto seq = t.begin();                  // index a growing sequence token by token
//   for (int32_t tok : tokens) t.append(seq, tok);
//   t.remove_path(tokens, 0);              // forget the substrings that start at index 0
//   auto d = t.speculate(context, 8, 1.0, 0.1);  // the best-scoring continuation of a suffix
//
// Memory: at most max_depth nodes per indexed token (usually far fewer: shared substrings
// share nodes); removed paths give their nodes back.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tandem {

class suffix_trie {
 public:
  explicit suffix_trie(int max_depth);

  // The open paths of one sequence being indexed (the nodes its last tokens end at).
  struct cursor {
    std::vector<int32_t> open;  // node of each path still shorter than max_depth
  };
  cursor begin() const { return {}; }
  // Extends every open path of `c` by `token` and starts a new one there.
  void append(cursor& c, int32_t token);
  // Indexes a whole string (each start's path, cut at the string's end).
  void insert(std::span<const int32_t> tokens);
  // Undoes the path that starts at tokens[start] (it must have been indexed from `tokens`).
  void remove_path(std::span<const int32_t> tokens, size_t start);
  void remove(std::span<const int32_t> tokens);

  struct draft_result {
    std::vector<int32_t> tokens;
    double score = 0;    // expected accepted tokens: the sum of the continuation's probabilities
    int match_length = 0;
  };
  // ArcticInference's rule: for every suffix of `context` that is a path here (length 1 up
  // to max_depth - 1), the most frequent child again and again (ties: the lower token id)
  // while the path's probability (product of child count / parent count) stays at or above
  // min_prob, at most min(max_tokens, spec_factor * suffix length) tokens; the draft with the
  // highest score wins, the longer suffix on a tie.
  draft_result speculate(std::span<const int32_t> context, int max_tokens, double spec_factor,
                         double min_prob) const;

  // How often `path` occurs (0 when absent; the empty path: the number of indexed paths).
  int64_t count(std::span<const int32_t> path) const;
  int64_t nodes() const { return static_cast<int64_t>(nodes_.size() - free_.size()) - 1; }  // without the root
  int max_depth() const { return max_depth_; }

 private:
  struct node {
    int32_t token = -1;
    int32_t count = 0;
    int32_t parent = -1;
    int32_t depth = 0;
    int32_t first_child = -1, next_sibling = -1, prev_sibling = -1;
  };
  int32_t child(int32_t parent, int32_t token) const;
  draft_result walk(int32_t from, int max_tokens, double min_prob) const;
  int32_t add_child(int32_t parent, int32_t token);
  void drop(int32_t n);
  static uint64_t key(int32_t parent, int32_t token) {
    return static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32 | static_cast<uint32_t>(token);
  }

  int max_depth_;
  std::vector<node> nodes_;  // nodes_[0] is the root
  std::vector<int32_t> free_;
  std::unordered_map<uint64_t, int32_t> children_;
};

}  // namespace tandem
