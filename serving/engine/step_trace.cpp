#include "step_trace.hpp"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "tandem/engine.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"

namespace tandem {

std::string_view name(step_kind k) {
  switch (k) {
    case step_kind::decode: return "decode";
    case step_kind::draft:  return "draft";
    case step_kind::other:  return "other";
  }
  return "?";
}

void add_step(engine_stats& s, const step_record& r) {
  s.step_seconds += r.took_s;
  s.step_propose_seconds += r.propose_s;
  s.step_forward_seconds += r.forward_s;
  s.step_sample_seconds += r.sample_s;
  s.step_verify_seconds += r.verify_s;
  s.step_observe_seconds += r.observe_s;
  switch (r.kind) {
    case step_kind::decode: ++s.decode_steps, s.decode_step_seconds += r.took_s; break;
    case step_kind::draft:  ++s.draft_steps, s.draft_step_seconds += r.took_s; break;
    case step_kind::other:  ++s.other_steps, s.other_step_seconds += r.took_s; break;
  }
}

void step_trace::open(const std::string& path) {
  close();
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw error(fmt::format("the step trace {} cannot be opened for appending: {}", path, std::strerror(errno)));
}

void step_trace::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void step_trace::write(const step_record& r) {
  if (!file_) return;
  const std::string line = fmt::format(
      "{{\"step\":{},\"kind\":\"{}\",\"rows\":{},\"seqs\":{},\"eligible\":{},\"asked\":{},\"drafted\":{},\"accepted\":{},\"took_s\":{:.7f},"
      "\"propose_s\":{:.7f},\"forward_s\":{:.7f},\"sample_s\":{:.7f},\"verify_s\":{:.7f},\"observe_s\":{:.7f},"
      "\"cost_s\":{:.7f},\"cost_base_s\":{:.7f},\"cost_largest\":{}}}\n",
      r.step, name(r.kind), r.rows, r.seqs, r.eligible, r.asked, r.drafted, r.accepted, r.took_s, r.propose_s, r.forward_s, r.sample_s,
      r.verify_s, r.observe_s, r.cost_s, r.cost_base_s, r.cost_largest);
  // A diagnostic must not fail the requests of a step: a trace that cannot be written (a
  // full disk) is reported once and stops.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    default_logger().warn(fmt::format("the step trace stopped: a write failed: {}", std::strerror(errno)));
    close();
  }
}

}  // namespace tandem
