#define PCRE2_CODE_UNIT_WIDTH 8
#include "pcre2_regex.hpp"

#include <pcre2.h>

#include "tandem/error.hpp"

namespace tandem::detail {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

struct match_data_deleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

pcre2_regex::pcre2_regex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!code) {
    throw error("tokenizer regex '" + pattern + "' does not compile at offset " +
                std::to_string(err_offset) + ": " + pcre2_message(err));
  }
  code_ = code;
  // No JIT on this build or platform is fine: the interpreter gives the same matches.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

pcre2_regex::~pcre2_regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void pcre2_regex::find_all(std::string_view subject,
                           std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, match_data_deleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  if (!md) throw error("tokenizer regex: out of memory for match data");
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  // The caller validated the whole text once; checking per match would be quadratic.
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (pos < subject.size()) {
    int rc = pcre2_match(code, s, subject.size(), pos, options, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      options |= PCRE2_NO_JIT;  // a huge run outgrew the JIT stack: the interpreter copes
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw error("tokenizer regex '" + pattern_ + "' failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] == ov[0]) {  // an empty match: step over one character so the loop ends
      pos = ov[0] + 1;
      while (pos < subject.size() && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    pos = ov[1];
  }
}

}  // namespace tandem::detail
