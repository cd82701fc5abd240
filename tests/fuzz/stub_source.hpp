#pragma once
// stub_source: a completion_source for fuzz_http with a real tokenizer (the synthetic vocab
// of tests/tokenizer) and a real chat template (the SmolLM2 one of tests/fixtures/chat), so
// request bodies reach encode_chat_prompt; the "engine" keeps submitted requests until
// finish_all() ends each with one token and finish_reason::length.
#include <boost/json.hpp>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "completion_source.hpp"
#include "fuzz_support.hpp"
#include "synthetic_vocab.hpp"
#include "tandem/chat_prompt.hpp"
#include "tandem/stream_decoder.hpp"

namespace tandem::fuzz {

class stub_source final : public completion_source {
 public:
  stub_source()
      : tok_(tokenizer::from_metadata(test::synthetic_vocab::make({"h e", "l l", "he ll"}).metadata())),
        tpl_(fixture_template("smollm2")) {}

  source_state state() const override { return source_state::ready; }
  const std::string& model_name() const override { return name_; }
  int64_t max_model_len() const override { return 4096; }
  int64_t kv_pool_tokens() const override { return 8192; }
  int32_t vocab_size() const override { return tok_.vocab_size(); }
  std::vector<int32_t> encode(std::string_view text) const override { return tok_.encode(text); }
  std::vector<int32_t> chat_tokens(std::span<const chat_message> messages, const std::string& tools_json) const override {
    chat_render_options o;
    o.tools_json = tools_json;
    return encode_chat_prompt(tok_, tpl_, messages, o);
  }
  std::string chat_template_source() const override { return tpl_.source(); }
  std::string decode(std::span<const int32_t> ids) const override { return tok_.decode(ids); }
  std::string token_bytes(int32_t id) const override { return tok_.token_bytes(id); }
  std::unique_ptr<text_decoder> decoder(bool skip_special) const override {
    return std::make_unique<decoder_impl>(tok_, skip_special);
  }
  uint64_t submit(generation_request r) override {
    std::lock_guard l(mu_);
    live_.push_back({next_, std::move(r)});
    return next_++;
  }
  void cancel(uint64_t) override {}
  source_stats stats() const override { return {}; }
  void shutdown() override { live_.clear(); }

  // What the engine would do: one token, then the end, for every request submitted.
  void finish_all() {
    std::vector<std::pair<uint64_t, generation_request>> live;
    {
      std::lock_guard l(mu_);
      live.swap(live_);
    }
    for (auto& [id, r] : live) {
      if (!r.on_event) continue;
      token_event ev;
      ev.request_id = id;
      ev.token = tok_.find("a").value_or(0);
      r.on_event(ev);
      token_event end;
      end.request_id = id;
      end.finished = finish_reason::length;
      r.on_event(end);
    }
  }

 private:
  class decoder_impl final : public text_decoder {
   public:
    decoder_impl(const tokenizer& t, bool skip) : d_(t, skip) {}
    std::string push(int32_t id) override { return d_.push(id); }
    std::string flush() override { return d_.flush(); }

   private:
    stream_decoder d_;
  };

  static std::string fixture_template(const char* name) {
    std::ifstream in(source_root() / "tests/fixtures/chat/cases.json", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return std::string(boost::json::parse(ss.str()).at("templates").at(name).as_string());
  }

  tokenizer tok_;
  chat_template tpl_;
  std::string name_ = "fuzz-model";
  std::mutex mu_;
  uint64_t next_ = 1;
  std::vector<std::pair<uint64_t, generation_request>> live_;
};

}  // namespace tandem::fuzz
