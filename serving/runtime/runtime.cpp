#include "tandem/runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>

#include "kv_type.hpp"
#include "rank_setup.hpp"
#include "step_broadcast.hpp"
#include "registry.hpp"
#include "tandem/backend.hpp"
#include "tandem/chat_prompt.hpp"
#include "tandem/drafter.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"
#include "tandem/model.hpp"
#include "tandem/model_store.hpp"
#include "tandem/pipeline.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/scheduler.hpp"
#include "tandem/transport.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

// Members are declared in the order they must be built; they are destroyed in reverse,
// so the engine goes before the model, the model before the backend that holds its
// buffers, and the backend before the weights it may reference.
struct runtime::impl {
  pipeline_spec spec;
  std::unique_ptr<plugin_host> host;
  std::unique_ptr<weight_format> weights;
  std::unique_ptr<backend> be;
  std::unique_ptr<transport> comm;
  std::unique_ptr<scheduler> sched;
  std::unique_ptr<drafter> draft;  // null without a drafter: section
  std::unique_ptr<tokenizer> tok;
  std::unique_ptr<chat_template> chat;
  std::unique_ptr<model> mdl;
  const broadcasting_model* lead = nullptr;  // mdl when it drives other ranks
  std::unique_ptr<engine> eng;
  std::string bos_text, eos_text;
  int64_t max_model_len = 0;
  int64_t kv_pool_tokens = 0;
  std::vector<std::string> summary;
};

runtime::runtime() : impl_(std::make_unique<impl>()) {}
runtime::~runtime() = default;

namespace {

pipeline_spec load_spec(const std::filesystem::path& file, plugin_host& host,
                        const std::vector<std::string>& overrides) {
  pipeline_result r = load_pipeline(file, host, overrides);
  if (!r.errors.empty() || !r.spec) {
    std::string all;
    for (const diagnostic& d : r.errors) all += (all.empty() ? "" : "\n") + d.str();
    throw config_error("", all.empty() ? "pipeline could not be loaded" : all);
  }
  for (const diagnostic& d : r.warnings) default_logger().warn(d.str());  // ignored settings
  return std::move(*r.spec);
}

// KV pages: the pipeline's kv_tokens, or as many as the backend's memory budget holds
// (asked after the weights are loaded: on backend.cuda its memory_utilization share of the
// free GPU memory), never more than 64 sequences of the maximum length. `how` says which
// bound sized it, for the start-up summary.
int64_t kv_pages_for(const pipeline_spec& spec, const backend& be, const kv_spec& per_token,
                     int64_t max_model_len, std::string& how) {
  const int64_t page = spec.engine.get_int("page_size");
  int64_t tokens = spec.engine.get_int("kv_tokens");
  how = "engine.kv_tokens";
  if (tokens == 0) {
    const size_t budget = be.memory_budget();
    const int64_t fit = static_cast<int64_t>(budget / static_cast<size_t>(per_token.bytes_per_token()));
    tokens = std::min(fit, 64 * max_model_len);
    how = fit > tokens ? fmt::format("capped at 64 x max_model_len; the backend's budget of {} MiB holds {} tokens",
                                     budget >> 20, fit)
                       : fmt::format("the backend's budget of {} MiB", budget >> 20);
  }
  const int64_t pages = tokens / page;
  if (pages < (max_model_len + page - 1) / page && spec.engine.get_int("kv_tokens") == 0)
    throw config_error("engine.kv_tokens", fmt::format("the backend's memory holds only {} tokens of "
                                                       "KV, less than one sequence of {}", tokens,
                                                       max_model_len));
  if (pages < 1) throw config_error("engine.kv_tokens", "the KV pool must hold at least one page");
  return pages;
}

// The element type of the K/V groups (the first group's when they differ), for the summary.
std::string kv_types_of(const kv_spec& s) {
  std::string out;
  for (const kv_group& g : s.groups)
    if (out.find(name(g.type)) == std::string::npos) out += (out.empty() ? "" : "/") + std::string(name(g.type));
  return out;
}

prefix_cache_settings cache_settings(const config& eng) {
  prefix_cache_settings c;
  c.enabled = eng.get_bool("prefix_caching");
  c.hash = eng.get_string("prefix_hash");
  c.retention = eng.get_string("retention") == "session" ? retention_policy::session : retention_policy::lru;
  c.retention_s = eng.get_number("retention_s");
  c.retention_share = eng.get_number("retention_share");
  c.warm_tokens = eng.get_int("warm_tokens");
  return c;
}

// A drafter that reads the target's hidden states gets the target's backend, embedding
// table and head; one whose layers or needs this target cannot meet is refused at start.
void bind_drafter(drafter& d, const std::string& name, const model& mdl, backend& be) {
  const std::vector<int> layers = d.target_layers();
  if (layers.empty()) return;
  const model_info& info = mdl.info();
  for (int l : layers)
    if (l < 0 || l >= info.n_layers)
      throw config_error("drafter.plugin", fmt::format("{} reads target layer {}, but the model ({}) has layers 0..{}",
                                                       name, l, info.arch, info.n_layers - 1));
  draft_target t;
  t.be = &be;
  t.embedding = mdl.token_embedding();
  t.lm_head = mdl.output_head();
  if (!t.embedding || !t.lm_head)
    throw config_error("drafter.plugin", name + " shares the target's embedding table and head, which this process "
                                                "does not hold whole (topology with tensor or pipeline parallel ranks)");
  t.arch = info.arch;
  t.n_layers = info.n_layers;
  t.hidden = info.hidden;
  t.vocab = info.vocab;
  d.bind(t);
}

}  // namespace

std::unique_ptr<runtime> runtime::open(const std::filesystem::path& file, const runtime_options& opt) {
  auto say = [&](std::string_view s) { if (opt.progress) opt.progress(s); };
  std::unique_ptr<runtime> rt(new runtime());
  impl& m = *rt->impl_;
  m.host = std::make_unique<plugin_host>(plugin_host::default_search_path());
  m.spec = load_spec(file, *m.host, opt.overrides);

  const std::filesystem::path model_file = resolve_model(m.spec.model, opt.allow_pull, opt.progress);
  m.weights = m.host->create<weight_format>(m.spec.weights.name, m.spec.weights.cfg);
  say(fmt::format("opening {}", model_file.string()));
  m.weights->open(model_file);

  m.be = m.host->create<backend>(m.spec.backend.name, m.spec.backend.cfg);
  check_topology_runs(m.spec, *m.be);
  if (m.spec.transport.cfg.has(transport_keys::rank) && m.spec.transport.cfg.get_int(transport_keys::rank) != 0)
    throw config_error("transport.rank", "this process is rank 0; start the other ranks with `tandem worker --rank R`");
  if (m.spec.topo.ranks > 1) say(fmt::format("rank 0 of {}: waiting for the other ranks", m.spec.topo.ranks));
  m.comm = m.host->create<transport>(m.spec.transport.name, m.spec.transport.cfg);
  const tp_group tp = join_ranks(m.spec, *m.comm, *m.be, *m.weights, model_file);  // rank_setup.hpp
  m.sched = m.host->create<scheduler>(m.spec.scheduler.name, m.spec.scheduler.cfg);
  if (m.spec.drafter) {
    m.draft = m.host->create<drafter>(m.spec.drafter->name, m.spec.drafter->cfg);
  }
  m.tok = std::make_unique<tokenizer>(tokenizer::from_metadata(m.weights->meta(), model_file.string()));
  if (auto tmpl = m.weights->meta().get_string("tokenizer.chat_template"))
    m.chat = std::make_unique<chat_template>(*tmpl);
  if (m.tok->bos() >= 0) m.bos_text = m.tok->token_bytes(m.tok->bos());
  if (m.tok->eos() >= 0) m.eos_text = m.tok->token_bytes(m.tok->eos());

  say(fmt::format("loading weights onto {}", m.be->describe()));
  m.mdl = create_model(*m.be, *m.weights, model_file.string(), tp);
  apply_kv_dtype(m.spec.engine, *m.be, m.spec.backend.name, *m.mdl);
  if (m.draft) bind_drafter(*m.draft, m.spec.drafter->name, *m.mdl, *m.be);
  const model_info& info = m.mdl->info();
  const int64_t want_len = m.spec.engine.get_int("max_model_len");
  m.max_model_len = want_len > 0 ? want_len : info.context;
  const int page = static_cast<int>(m.spec.engine.get_int("page_size"));
  const kv_spec per_token = m.mdl->kv_needs();
  // Sized after the weights are on the device, from the memory they left.
  std::string sized_by;
  const int64_t pages = kv_pages_for(m.spec, *m.be, per_token, m.max_model_len, sized_by);
  m.mdl->allocate_kv(pages, page);
  m.kv_pool_tokens = pages * page;
  tell_workers_kv_pool(*m.comm, pages, page);
  // From here on the model broadcasts each step to the workers (so the engine does not).
  m.mdl = lead_ranks(std::move(m.mdl), *m.comm, m.spec);
  m.lead = dynamic_cast<const broadcasting_model*>(m.mdl.get());
  engine::parts parts;
  parts.model = m.mdl.get();
  parts.sched = m.sched.get();
  parts.comm = m.comm->world_size() > 1 ? nullptr : m.comm.get();
  parts.end_of_generation = m.tok->end_of_generation_ids();
  parts.max_model_len = m.max_model_len;
  parts.kv_pages = pages;
  parts.page_size = page;
  parts.cache = cache_settings(m.spec.engine);
  parts.drafter = m.draft.get();
  const prefix_cache_settings cache = parts.cache;
  m.eng = std::make_unique<engine>(std::move(parts));

  const int64_t kv_tokens = pages * page;
  m.summary.push_back(fmt::format("model: {} ({}, {} layers, hidden {}, vocab {}; {})", m.spec.model,
                                  info.arch, info.n_layers, info.hidden, info.vocab, info.detail));
  m.summary.push_back(fmt::format("plugins: {}, {}, {}, {}", m.spec.weights.name, m.spec.backend.name,
                                  m.spec.scheduler.name, m.spec.transport.name));
  if (m.draft) {
    const draft_limits lim = m.draft->limits();
    m.summary.push_back(fmt::format("speculative decoding: {}, {} {} draft tokens per step{}", m.spec.drafter->name,
                                    lim.adaptive ? "adaptive, 0 to" : "up to", lim.max_draft,
                                    lim.disable_above_batch > 0
                                        ? fmt::format(", off above {} sequences per step", lim.disable_above_batch)
                                        : std::string()));
  }
  m.summary.push_back(fmt::format("backend: {}", m.be->describe()));
  m.summary.push_back(fmt::format("KV per token: {} bytes ({})", per_token.bytes_per_token(), per_token.describe()));
  m.summary.push_back(fmt::format(
      "KV pool: {} tokens ({} pages of {}, {:.1f} MiB of {}; {}); maximum concurrency for {} tokens per "
      "request: {:.2f}x", kv_tokens, pages, page,
      static_cast<double>(kv_tokens) * per_token.bytes_per_token() / (1 << 20), kv_types_of(per_token), sized_by,
      m.max_model_len, static_cast<double>(pages) / static_cast<double>((m.max_model_len + page - 1) / page)));
  m.summary.push_back(!cache.enabled ? std::string("prefix cache: off")
                      : fmt::format("prefix cache: on ({}), retention {}", cache.hash,
                                    cache.retention == retention_policy::lru
                                        ? std::string("lru")
                                        : fmt::format("session ({} s, {:.0f}% of the pool)", cache.retention_s,
                                                      100 * cache.retention_share)));
  return rt;
}

engine& runtime::eng() { return *impl_->eng; }
const tokenizer& runtime::tok() const { return *impl_->tok; }
const pipeline_spec& runtime::spec() const { return impl_->spec; }
const std::string& runtime::model_name() const { return impl_->spec.model; }
int64_t runtime::max_model_len() const { return impl_->max_model_len; }
int64_t runtime::kv_pool_tokens() const { return impl_->kv_pool_tokens; }
const std::vector<std::string>& runtime::summary() const { return impl_->summary; }
const chat_template* runtime::chat() const { return impl_->chat.get(); }
std::string runtime::ranks_failure() const {
  return impl_->lead ? impl_->lead->failure().value_or(std::string()) : std::string();
}

device runtime::model_device() const { return impl_->be->dev(); }

size_t runtime::weight_bytes_per_token() const {
  size_t total = 0;
  for (const tensor_info& t : impl_->weights->tensors()) total += t.nbytes;
  return total;
}

std::string runtime::render_chat(std::span<const chat_message> messages, bool add_generation_prompt) const {
  if (!impl_->chat) throw model_error(impl_->spec.model, "the model has no chat template");
  chat_render_options o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = impl_->bos_text;
  o.eos_token = impl_->eos_text;
  return impl_->chat->render(messages, o);
}

std::vector<int32_t> runtime::tokens_for_chat(std::span<const chat_message> messages,
                                              bool add_generation_prompt) const {
  std::vector<int32_t> ids;
  if (impl_->tok->add_bos() && impl_->tok->bos() >= 0) ids.push_back(impl_->tok->bos());
  if (!impl_->chat) throw model_error(impl_->spec.model, "the model has no chat template");
  chat_render_options o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = impl_->bos_text;
  o.eos_token = impl_->eos_text;
  // Message content stays plain text unless the pipeline says otherwise (chat_prompt.hpp).
  const chat_prompt_options p{.parse_special_in_content = impl_->spec.chat.get_bool("parse_special_in_content")};
  std::vector<int32_t> body = encode_chat_prompt(*impl_->tok, *impl_->chat, messages, o, p);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace tandem
