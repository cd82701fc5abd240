#include "yaml_reader.hpp"

#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "suggest.hpp"
#include "yaml_documents.hpp"

namespace tandem::host_detail {
namespace {

// A pipeline is a few dozen nodes; anything that expands past this through aliases is an
// alias bomb ("billion laughs"), refused before any code walks it as a tree.
constexpr uint64_t max_expanded_nodes = 100000;

// Values keyed by node identity (an alias and its anchor are one node). yaml-cpp offers
// only Node::is() for identity, so nodes are bucketed by their position in the text.
template <class V>
class node_map {
 public:
  const V* find(const YAML::Node& n) const {
    auto it = by_pos_.find(n.Mark().pos);
    if (it == by_pos_.end()) return nullptr;
    for (const auto& [node, value] : it->second)
      if (node.is(n)) return &value;
    return nullptr;
  }
  V* find(const YAML::Node& n) { return const_cast<V*>(std::as_const(*this).find(n)); }
  // False when the node is there already.
  bool insert(const YAML::Node& n, V value = {}) {
    if (find(n)) return false;
    by_pos_[n.Mark().pos].emplace_back(n, std::move(value));
    return true;
  }

 private:
  std::unordered_map<int, std::vector<std::pair<YAML::Node, V>>> by_pos_;
};

struct reader {
  std::string file;
  diag_sink& sink;

  source_pos pos(const YAML::Mark& m) const { return {file, m.line + 1, m.column + 1}; }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // yaml-cpp keeps every pair of a mapping, duplicates included, so they are visible here.
  // An alias is the very node it names: each node is checked once, however many aliases
  // reach it (walking the alias graph as a tree made a 660-byte alias bomb take minutes).
  void check_duplicates(const YAML::Node& node, const std::string& path) {
    if (!(node.IsSequence() || node.IsMap()) || !checked.insert(node)) return;
    if (node.IsSequence()) {
      for (size_t i = 0; i < node.size(); ++i)
        check_duplicates(node[i], path + "[" + std::to_string(i) + "]");
      return;
    }
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        sink.error(pos(kv.first.Mark()), path, "keys must be plain names, not a collection");
        continue;
      }
      const std::string& key = kv.first.Scalar();
      auto [it, fresh] = seen.emplace(key, kv.first.Mark());
      if (!fresh) {
        sink.error(pos(kv.first.Mark()), join(path, key),
                   "duplicate key (first set at line " + std::to_string(it->second.line + 1) +
                       ", column " + std::to_string(it->second.column + 1) + ")");
        continue;  // the first one is used; its children were checked already
      }
      check_duplicates(kv.second, join(path, key));
    }
  }

  // Nodes the document holds once aliases are expanded (saturating at max_expanded_nodes + 1),
  // each distinct node counted once and remembered. A node is entered with the saturated size
  // already recorded, so an alias to a node that contains it (`a: &a [x, *a]`, a cycle yaml-cpp
  // builds as such) counts as an endless expansion instead of recursing until the stack
  // overflows (found by tests/fuzz/fuzz_pipeline).
  uint64_t expanded_size(const YAML::Node& node) {
    if (!(node.IsSequence() || node.IsMap())) return 1;
    if (const uint64_t* known = sizes.find(node)) return *known;
    sizes.insert(node, max_expanded_nodes + 1);
    uint64_t n = 1;
    for (const auto& item : node) {
      n += node.IsMap() ? expanded_size(item.first) + expanded_size(item.second) : expanded_size(item);
      if (n > max_expanded_nodes) break;
    }
    n = std::min(n, max_expanded_nodes + 1);
    *sizes.find(node) = n;
    return n;
  }

  node_map<bool> checked;
  node_map<uint64_t> sizes;

  static raw_value to_raw(const YAML::Node& v, const source_pos& key_pos, source_pos value_pos) {
    raw_value r;
    r.pos = value_pos;
    if (v.IsNull()) {
      r.k = raw_value::kind::null;
      r.pos = key_pos;  // yaml-cpp marks an empty value at the next token, often a line below
    } else if (v.IsScalar()) {
      r.k = v.Tag() == "?" ? raw_value::kind::plain : raw_value::kind::quoted;
      r.text = v.Scalar();
    } else {
      r.k = v.IsSequence() ? raw_value::kind::sequence : raw_value::kind::mapping;
    }
    return r;
  }

  static std::string shape(const YAML::Node& v) {
    if (v.IsSequence()) return "a list";
    if (v.IsMap()) return "a mapping";
    if (v.IsNull()) return "nothing";
    return "'" + v.Scalar() + "'";
  }

  void read_entries(const YAML::Node& map, raw_section& sec) {
    for (const auto& kv : map) {
      if (!kv.first.IsScalar() || sec.find(kv.first.Scalar())) continue;  // reported already
      source_pos kp = pos(kv.first.Mark());
      sec.entries.push_back({kv.first.Scalar(), kp, to_raw(kv.second, kp, pos(kv.second.Mark()))});
    }
  }

  raw_section read_section(const section_info& info, const YAML::Node& key, const YAML::Node& v) {
    raw_section sec{std::string(info.name), pos(key.Mark()), {}};
    if (info.kind == section_kind::scalar) {
      sec.entries.push_back({"", sec.key_pos, to_raw(v, sec.key_pos, pos(v.Mark()))});
    } else if (v.IsMap()) {
      read_entries(v, sec);
    } else if (info.kind == section_kind::plugin && v.IsScalar()) {
      // Shorthand `transport: local` names just the plugin.
      sec.entries.push_back({"plugin", sec.key_pos, to_raw(v, sec.key_pos, pos(v.Mark()))});
    } else if (!v.IsNull()) {
      sec.malformed = true;
      std::string want = info.kind == section_kind::plugin
                             ? "a mapping such as { plugin: NAME, ... } or a plugin name"
                             : "a mapping of settings";
      sink.error(pos(v.Mark()), sec.name, "expected " + want + ", got " + shape(v));
    }
    return sec;
  }

  std::optional<raw_document> read_root(const YAML::Node& root) {
    if (!root.IsMap()) {
      sink.error(pos(root.Mark()), "",
                 "expected a mapping of sections (model, weights, backend, ...), got " + shape(root));
      return std::nullopt;
    }
    if (expanded_size(root) > max_expanded_nodes) {
      sink.error(pos(root.Mark()), "",
                 "the document expands to more than " + std::to_string(max_expanded_nodes) +
                     " nodes through its aliases (an alias bomb?); a pipeline needs a few dozen");
      return std::nullopt;
    }
    check_duplicates(root, "");
    std::vector<std::string> names;
    for (const section_info& s : known_sections()) names.emplace_back(s.name);
    raw_document doc;
    for (const auto& kv : root) {
      if (!kv.first.IsScalar() || doc.find(kv.first.Scalar())) continue;  // reported already
      const std::string& name = kv.first.Scalar();
      const section_info* info = find_section(name);
      if (!info) {
        sink.error(pos(kv.first.Mark()), name, "unknown section", did_you_mean(name, names));
        continue;
      }
      doc.sections.push_back(read_section(*info, kv.first, kv.second));
    }
    return doc;
  }
};

}  // namespace

std::optional<raw_document> read_pipeline_yaml(const std::filesystem::path& file, diag_sink& sink) {
  reader r{file.string(), sink};
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    sink.error({r.file, 0, 0}, "", std::string("cannot read the file: ") + std::strerror(errno));
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  yaml_documents docs;
  try {
    docs = read_yaml_documents(text.str());  // not YAML::LoadAll: yaml_documents.hpp says why
  } catch (const YAML::Exception& e) {
    sink.error(r.pos(e.mark), "", "invalid YAML: " + e.msg);
    return std::nullopt;
  }
  if (docs.count == 0 || docs.first.IsNull()) {
    sink.error({r.file, 1, 1}, "", "the file is empty (expected sections such as model, backend, "
                                   "scheduler)");
    return std::nullopt;
  }
  if (docs.count > 1) sink.error(r.pos(docs.second), "", "more than one YAML document; a pipeline file holds one");
  return r.read_root(docs.first);
}

}  // namespace tandem::host_detail
