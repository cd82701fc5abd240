#pragma once
// What backend.cuda's recorded steps did over its life: how often run_recorded() captured a
// new CUDA graph, replayed one or ran its body eagerly (graphs off, or op profiling), and
// how often every graph was dropped, by why. A step whose graph was dropped is captured
// again (an eager run, a capture and an instantiation: several times a replay's cost), so
// drops that keep coming are what makes recorded steps slow. TANDEM_CUDA_GRAPH_STATS=1 logs
// them when the backend is destroyed.
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem::cuda {

// Why drop_graphs() threw every recorded graph away: a scratch buffer a recorded step uses
// was reallocated (grow()), the cache reached max_graphs, the RoPE table grew, the decode
// attention's tickets grew.
enum class graph_drop : uint8_t { scratch, max_graphs, rope_table, tickets };

struct graph_stats {
  uint64_t captures = 0, replays = 0, eager = 0;
  uint64_t dropped = 0;                  // graphs destroyed by drops
  std::array<uint64_t, 4> drops{};       // drops that destroyed any, by graph_drop

  void drop(graph_drop why, size_t graphs) {
    if (graphs == 0) return;  // nothing recorded was lost
    ++drops[static_cast<size_t>(why)];
    dropped += graphs;
  }

  std::string describe(size_t held) const {
    const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
    char line[384];
    std::snprintf(line, sizeof line,
                  "backend.cuda CUDA graphs: %llu captures, %llu replays, %llu eager runs; %llu graphs dropped in "
                  "%llu drops (scratch growth %llu, max_graphs %llu, rope table %llu, tickets %llu); %zu held at the end",
                  u(captures), u(replays), u(eager), u(dropped), u(drops[0] + drops[1] + drops[2] + drops[3]),
                  u(drops[0]), u(drops[1]), u(drops[2]), u(drops[3]), held);
    return line;
  }
};

}  // namespace tandem::cuda
