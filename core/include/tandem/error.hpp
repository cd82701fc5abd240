#pragma once
// The exceptions tandem throws inside C++ code (never across an extern "C" entry).
//
// Each subclass carries the context a user needs to act on it: the key path of a bad
// setting, the plugin that failed, the request that failed, the file that is corrupt.
// Hot paths where failure is expected (KV pool full, request cancelled) return status
// values instead of throwing.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tandem/export.hpp"

namespace tandem {

class TANDEM_API error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~error() override;
};

// A setting in a pipeline, on the command line or in the environment is wrong.
class TANDEM_API config_error : public error {
 public:
  config_error(std::string key_path, const std::string& message);
  ~config_error() override;
  const std::string& key_path() const { return key_path_; }

 private:
  std::string key_path_;
};

// A plugin could not be found, loaded, probed or created, or failed inside.
class TANDEM_API plugin_error : public error {
 public:
  plugin_error(std::string plugin, const std::string& message);
  ~plugin_error() override;
  const std::string& plugin() const { return plugin_; }

 private:
  std::string plugin_;
};

// A model file is missing, truncated, corrupt or of an unsupported kind.
class TANDEM_API model_error : public error {
 public:
  model_error(std::string file, const std::string& message);
  ~model_error() override;
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// One request failed; the others in its batch go on.
class TANDEM_API request_error : public error {
 public:
  request_error(uint64_t request_id, const std::string& message);
  ~request_error() override;
  uint64_t request_id() const { return request_id_; }

 private:
  uint64_t request_id_;
};

// A device (CUDA) call failed; `op` names the operation that was running.
class TANDEM_API device_error : public error {
 public:
  device_error(std::string op, int status, const std::string& message);
  ~device_error() override;
  const std::string& op() const { return op_; }
  int status() const { return status_; }

 private:
  std::string op_;
  int status_;
};

}  // namespace tandem
