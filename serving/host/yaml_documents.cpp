#include "yaml_documents.hpp"

#include <sstream>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

namespace tandem::host_detail {
namespace {

// Records where each document starts; the nodes themselves come from YAML::Load.
class document_starts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

yaml_documents read_yaml_documents(const std::string& text) {
  yaml_documents out;
  out.first = YAML::Load(text);  // one document: one HandleNextDocument, which always returns
  std::istringstream in(text);
  YAML::Parser parser(in);
  document_starts starts;
  // At most two rounds: a pipeline holds one document, and a second one is an error either way.
  while (starts.marks.size() < 2 && parser.HandleNextDocument(starts)) {
  }
  out.count = starts.marks.size();
  if (out.count == 2) out.second = starts.marks[1];
  return out;
}

}  // namespace tandem::host_detail
