#pragma once
// A dflash2 drafter directory on the host: config.json, the tensors of model.safetensors
// (or the shards of model.safetensors.index.json), every file checked against
// MANIFEST.sha256. Every tensor ARCHITECTURE.md names is present with its shape, in f32,
// f16 or bf16, and no other tensor is (a file for another config is refused, not half
// used). The tensors stay mapped while this object lives (backend.cpu's linears read them
// in place).
//
//   auto w = dflash2_weights::open("drafters/smollm2-135m-instruct-dflash2");
//   const tensor_info& fc = w->tensor("fc.weight");
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "dflash2_config.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

namespace safetensors {
class model_files;
}

class dflash2_weights {
 public:
  // model_error naming the file (and the tensor) when anything is missing or wrong.
  static std::unique_ptr<dflash2_weights> open(const std::filesystem::path& dir);
  ~dflash2_weights();

  const dflash2_config& config() const { return cfg_; }
  const std::filesystem::path& dir() const { return dir_; }
  // One of the tensors ARCHITECTURE.md lists (checked at open); tandem::error otherwise.
  const tensor_info& tensor(const std::string& name) const;

 private:
  dflash2_weights() = default;

  std::filesystem::path dir_;
  dflash2_config cfg_;
  std::unique_ptr<safetensors::model_files> files_;
  std::map<std::string, tensor_info, std::less<>> tensors_;
};

// name -> shape of every tensor a drafter of config `c` has (ARCHITECTURE.md, "Tensors").
std::map<std::string, std::vector<int64_t>> dflash2_tensor_shapes(const dflash2_config& c);

}  // namespace tandem
