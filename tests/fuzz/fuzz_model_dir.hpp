#pragma once
// Shared by the harnesses whose input is a model directory (fuzz_hf_model, fuzz_exl3): the
// bytes hold several files, each introduced by a line "=== NAME" (at the start of the input
// or after a newline), and are written to a scratch directory of this process before the
// reader under test opens it. Text before the first marker is dropped; a name that is not a
// plain file name ([A-Za-z0-9._-], 1..64 characters, not starting with '.') drops its record,
// so nothing is written outside the scratch directory. A later record of the same name wins.
//
//   === config.json
//   {"model_type": "llama", ...}
//   === model.safetensors
//   <8-byte length><header JSON><data>
//
// make_seeds.py writes the seeds in this form (its `model_dir` function). run_model_input()
// is such a harness's whole LLVMFuzzerTestOneInput, with the checks both readers share.
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::fuzz {

inline bool plain_file_name(std::string_view n) {
  if (n.empty() || n.size() > 64 || n.front() == '.') return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

// The records of `in`: file name -> content.
inline std::map<std::string, std::string_view> split_files(std::string_view in) {
  constexpr std::string_view marker = "=== ";
  std::map<std::string, std::string_view> files;
  size_t at = in.substr(0, marker.size()) == marker ? 0 : in.find("\n=== ");
  if (at != std::string_view::npos && at != 0) ++at;  // past the newline
  while (at != std::string_view::npos && at < in.size()) {
    const size_t name_begin = at + marker.size();
    const size_t name_end = in.find('\n', name_begin);
    if (name_end == std::string_view::npos) break;
    const size_t next = in.find("\n=== ", name_end);
    const size_t content_end = next == std::string_view::npos ? in.size() : next;
    const std::string name(in.substr(name_begin, name_end - name_begin));
    if (plain_file_name(name)) files[name] = in.substr(name_end + 1, content_end - name_end - 1);
    at = next == std::string_view::npos ? next : next + 1;
  }
  return files;
}

// A directory of this process (on /dev/shm when it exists: these harnesses write a few files
// per input), emptied by each fill() and removed at exit.
class scratch_dir {
 public:
  scratch_dir() {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "tandem-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  // Replaces the directory's files with the records of `input`.
  const std::filesystem::path& fill(std::string_view input) {
    for (const auto& e : std::filesystem::directory_iterator(path_)) std::filesystem::remove_all(e.path());
    for (const auto& [name, content] : split_files(input)) {
      std::ofstream out(path_ / name, std::ios::binary);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
      if (!out) std::abort();  // the scratch space is full: not a finding of the reader
    }
    return path_;
  }

 private:
  std::filesystem::path path_;
};

// Tensor names unique and found by find(); a plain tensor's nbytes = elements x element
// size and every byte readable; an opaque (exl3) tensor goes to `check_exl3`.
template <class Model, class CheckExl3>
void check_tensors(const Model& m, CheckExl3 check_exl3) {
  std::set<std::string> names;
  for (const tensor_info& t : m.tensors()) {
    require(names.insert(t.name).second, "a tensor name appears twice");
    require(m.find(t.name) == &t, "find() does not give the tensor of that name");
    if (t.type == dtype::opaque) {
      check_exl3(t);
      continue;
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    require(static_cast<int64_t>(t.nbytes) == numel * traits(t.type).block_bytes, "nbytes is not elements x size");
    read_all(t.data, t.nbytes);
  }
}

// The reader's tokenizer metadata builds a tokenizer with tokens, or throws model_error.
inline void check_tokenizer(const model_metadata& meta) {
  try {
    const auto tok = tokenizer::from_metadata(meta, "fuzz-model");
    require(tok.vocab_size() > 0, "a tokenizer was built with no tokens");
    note("tokenizer of " + std::to_string(tok.vocab_size()) + " tokens");
  } catch (const model_error& e) {
    note(std::string("tokenizer: ") + e.what());
  }
}

// One input: its files written to this process's scratch directory, opened as Model (which
// either throws model_error or is handed to `check`).
template <class Model, class Check>
int run_model_input(const uint8_t* data, size_t size, Check check) {
  static scratch_dir dir;
  const auto& path = dir.fill(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const Model m(path);
    note("read " + std::to_string(m.tensors().size()) + " tensors");
    check(m);
  } catch (const model_error& e) {
    note(e.what());
  }
  return 0;
}

}  // namespace tandem::fuzz
