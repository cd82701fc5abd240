// The sizes of each scale. "full" is what two CPU cores do in minutes; "smoke" only proves
// the scenarios run end to end (CI); "h200" is the seed's sizes, for backend.cuda on one H200.
#include <stdexcept>

#include "scenarios.hpp"

namespace tandem::bench {

scale scale_named(const std::string& name) {
  scale s;  // the defaults are the full (CPU) scale
  s.name = name;
  if (name == "full") return s;
  if (name == "smoke") {
    s.kv_tokens = 8192, s.max_model_len = 4096;
    s.s1 = {.session = 300, .doc = 600, .generation = 40};
    s.s2 = {.doc = 600, .tool_at_s = 0.3};
    s.s3 = {.sessions = {2}, .turns = 3, .reply = 12, .cold = 400, .cold_at_s = 0.5};
    // Agents of ~190 tokens; the background is a token gesture (it runs, it does not flush).
    s.s4 = {.system = 96, .tool_result = 32, .reply = 8, .doc = 160, .kv_tokens = 2048, .turns = 3, .docs = 2,
            .flush_docs = 1, .gap_s = 0.3, .doc_every_s = 0.4};
    return s;
  }
  if (name == "h200") {
    // The knobs: a warm page of 3584 tokens, late_cap 512, max_wait 1.5 s; the step
    // budget is warm_bypass's default, 4096 = one warm page + 512 decode tokens, so a warm
    // request is admitted in one step beside the decodes. Both schedulers get it.
    s.page_tokens = 3584, s.budget = 4096, s.late_cap = 512, s.max_batch = 32;
    // The seed's sizes (110k-token sessions, 100k+ documents) need more context than the
    // default model's 8192. The bench alone raises max_model_len: positions past 8192 are
    // extrapolated RoPE, so the tokens generated there are meaningless, but the work per
    // step (what these scenarios time) is the same as for a model trained that long.
    s.max_model_len = 131072;
    s.kv_tokens = 524288;  // 22.5 GiB of f32 KV: a few of the longest sequences at once
    s.warm_up = true;      // first kernel launches (module loading, cuBLAS) out of the timings
    s.s1 = {.session = 32768, .doc = 114688, .generation = 1000};
    // The tool call comes once the load is under way (steps, not seconds: the GPU's speed
    // must not decide whether it arrives before the load ends).
    s.s2 = {.doc = 122880, .tool = 48, .tool_at_s = 0, .tool_after_steps = 2};
    s.s3 = {.sessions = {4, 16}, .turns = 60, .reply = 24, .cold = 32768, .cold_at_s = 0.5};
    // Four agents with ~109k-token sessions (100k of context, then three tool results of 2k
    // and 64-token replies) on a 1M-token pool: the sessions take 42% of it, inside the
    // default retention share (0.5). Background documents of the model's own context (8k).
    s.s4 = {.system = 102400, .tool_result = 2048, .reply = 64, .doc = 8192, .kv_tokens = 1048576, .turns = 4,
            .docs = 16, .flush_docs = 129, .gap_s = 1.0, .first_doc_s = 0.3, .doc_every_s = 0.25};
    return s;
  }
  throw std::runtime_error("unknown scale '" + name + "' (smoke, full, h200)");
}

}  // namespace tandem::bench
