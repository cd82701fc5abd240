#pragma once
// Where a tensor's memory lives.
#include <cstdint>

namespace tandem {

enum class device_kind : uint8_t { cpu, cuda };

struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;  // GPU ordinal; 0 on the CPU
  friend bool operator==(const device&, const device&) = default;
};

inline constexpr device cpu_device{device_kind::cpu, 0};

}  // namespace tandem
