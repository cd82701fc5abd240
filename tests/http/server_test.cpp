#define BOOST_TEST_MODULE http_server
#include "live_server.hpp"

using namespace tandem::test;


BOOST_AUTO_TEST_CASE(plain_endpoints) {
  live_server s;
  BOOST_TEST(s.get("/health").status == 200);
  BOOST_TEST(json(s.get("/version")).at("version").is_string());
  auto models = json(s.get("/v1/models"));
  BOOST_TEST(models.at("data").at(0).at("id").as_string() == "fake-model");
  BOOST_TEST(models.at("data").at(0).at("max_model_len").as_int64() == 64);
  auto tok = json(s.post("/tokenize", R"({"prompt":"abc"})"));
  BOOST_TEST(tok.at("count").as_int64() == 3);
  BOOST_TEST(json(s.post("/detokenize", R"({"tokens":[104,105]})")).at("prompt").as_string() == "hi");
  expect_error(s.post("/detokenize", R"({"tokens":[999]})"), 400);
}

BOOST_AUTO_TEST_CASE(routing_errors) {
  tandem::server_options opt;
  opt.body_limit = 1024;
  live_server s(opt);
  expect_error(s.get("/nope"), 404);
  expect_error(s.get("/v1/chat/completions"), 405);
  expect_error(s.post("/health", "{}"), 405);
  expect_error(s.post("/v1/chat/completions", std::string(4096, ' ')), 413);
  expect_error(s.post("/v1/chat/completions", "{not json"), 400);
  expect_error(s.post("/v1/chat/completions", "{" + chat_hi + R"(,"model":"other"})"), 404);
  expect_error(s.post("/v1/chat/completions", "{" + chat_hi + R"(,"max_tokens":63})"), 400);  // 2 + 63 > 64
  expect_error(s.post("/v1/completions", R"({"prompt":"x","stop_token_ids":[300]})"), 400);
  expect_error(s.post("/v1/completions", R"({"prompt":[[1,2],[999]]})"), 400);
  expect_error(s.post("/v1/completions", R"({"prompt":""})"), 400);
  expect_error(s.post("/v1/chat/completions", R"({"messages":[{"role":"tool","content":"x"}]})"), 400);
  BOOST_TEST(s.get("/health").status == 200);  // still serving
  BOOST_TEST(s.src->submitted_ == 0);          // nothing bad reached the engine
}

BOOST_AUTO_TEST_CASE(health_follows_the_source) {
  live_server s;
  s.src->set_state(tandem::source_state::loading);
  expect_error(s.get("/health"), 503);
  expect_error(s.post("/v1/chat/completions", "{" + chat_hi + "}"), 503);
  s.src->set_state(tandem::source_state::dead);
  expect_error(s.get("/health"), 503);
}

BOOST_AUTO_TEST_CASE(chat_non_streaming) {
  live_server s;
  auto v = json(s.post("/v1/chat/completions", "{" + chat_hi + R"(,"model":"fake-model"})"));
  const auto& c = v.at("choices").at(0);
  BOOST_TEST(v.at("object").as_string() == "chat.completion");
  BOOST_TEST(c.at("message").at("role").as_string() == "assistant");
  BOOST_TEST(c.at("message").at("content").as_string() == reply_text);
  BOOST_TEST(c.at("finish_reason").as_string() == "stop");
  BOOST_TEST(v.at("usage").at("prompt_tokens").as_int64() == 2);
  BOOST_TEST(v.at("usage").at("completion_tokens").as_int64() == static_cast<int64_t>(reply_text.size() + 1));
}

BOOST_AUTO_TEST_CASE(stop_length_n_and_logprobs) {
  live_server s;
  auto stop = json(s.post("/v1/chat/completions", "{" + chat_hi + R"(,"stop":["world","zzz"]})"));
  BOOST_TEST(stop.at("choices").at(0).at("message").at("content").as_string() == "Hello ");
  BOOST_TEST(stop.at("choices").at(0).at("finish_reason").as_string() == "stop");
  auto len = json(s.post("/v1/completions", R"({"prompt":"x","max_tokens":3})"));
  BOOST_TEST(len.at("choices").at(0).at("text").as_string() == "Hel");
  BOOST_TEST(len.at("choices").at(0).at("finish_reason").as_string() == "length");
  auto n = json(s.post("/v1/completions", R"({"prompt":["a","b"],"n":2,"max_tokens":2})"));
  BOOST_TEST(n.at("choices").as_array().size() == 4u);
  for (int i = 0; i < 4; ++i) BOOST_TEST(n.at("choices").at(i).at("index").as_int64() == i);
  BOOST_TEST(n.at("usage").at("prompt_tokens").as_int64() == 2);
  auto lp = json(s.post("/v1/chat/completions", "{" + chat_hi + R"(,"max_tokens":2,"logprobs":true,"top_logprobs":2})"));
  const auto& content = lp.at("choices").at(0).at("logprobs").at("content");
  BOOST_TEST(content.as_array().size() == 2u);
  BOOST_TEST(content.at(0).at("token").as_string() == "H");
  BOOST_TEST(content.at(0).at("top_logprobs").as_array().size() == 2u);
  auto clp = json(s.post("/v1/completions", R"({"prompt":"x","max_tokens":2,"logprobs":1})"));
  BOOST_TEST(clp.at("choices").at(0).at("logprobs").at("tokens").as_array().size() == 2u);
  BOOST_TEST(clp.at("choices").at(0).at("logprobs").at("text_offset").at(1).as_int64() == 1);
}

BOOST_AUTO_TEST_CASE(chat_streaming_framing) {
  live_server s;
  auto r = s.post("/v1/chat/completions",
                  "{" + chat_hi + R"(,"stream":true,"stream_options":{"include_usage":true},"stop":"end"})");
  BOOST_TEST(r.status == 200);
  BOOST_TEST(r.content_type == "text/event-stream");
  auto [evs, done] = events(r.body);
  BOOST_TEST(done);
  BOOST_REQUIRE(evs.size() >= 4u);
  const auto id = evs[0].at("id").as_string();
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i < evs.size(); ++i) {
    BOOST_TEST(evs[i].at("id").as_string() == id);
    BOOST_TEST(evs[i].at("object").as_string() == "chat.completion.chunk");
    const auto& choices = evs[i].at("choices").as_array();
    if (i + 1 == evs.size()) {  // the usage chunk
      BOOST_TEST(choices.empty());
      BOOST_TEST(evs[i].at("usage").at("completion_tokens").as_int64() > 0);
      continue;
    }
    BOOST_TEST(evs[i].at("usage").is_null());
    const auto& delta = choices.at(0).at("delta").as_object();
    BOOST_TEST(delta.contains("role") == (i == 0));
    if (delta.contains("content")) text += delta.at("content").as_string();
    if (!choices.at(0).at("finish_reason").is_null()) {
      ++finishes;
      BOOST_TEST(choices.at(0).at("finish_reason").as_string() == "stop");
      BOOST_TEST(i + 2 == evs.size(), "the finish chunk comes right before usage");
    }
  }
  BOOST_TEST(finishes == 1);
  BOOST_TEST(text == "Hello world. The ");  // "end" never leaks, not even in part
}

BOOST_AUTO_TEST_CASE(completion_streaming_keeps_alive) {
  live_server s;
  net::io_context ioc;
  beast::tcp_stream st(ioc);
  st.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), s.port));
  beast::flat_buffer buf;
  for (int round = 0; round < 2; ++round) {  // two exchanges on one connection
    bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/v1/completions", 11};
    req.set(bhttp::field::host, "x");
    req.body() = R"({"prompt":"x","stream":true,"max_tokens":4})";
    req.prepare_payload();
    bhttp::write(st, req);
    bhttp::response<bhttp::string_body> res;
    bhttp::read(st, buf, res);
    auto [evs, done] = events(res.body());
    BOOST_TEST(done);
    std::string text;
    for (const auto& e : evs) text += e.at("choices").at(0).at("text").as_string();
    BOOST_TEST(text == "Hell");
    BOOST_TEST(evs.back().at("choices").at(0).at("finish_reason").as_string() == "length");
  }
}

BOOST_AUTO_TEST_CASE(disconnect_cancels_the_engine_request) {
  live_server s({}, std::chrono::milliseconds(20));  // slow: ~0.5 s for the whole reply
  {
    net::io_context ioc;
    beast::tcp_stream st(ioc);
    st.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), s.port));
    bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/v1/chat/completions", 11};
    req.set(bhttp::field::host, "x");
    req.body() = "{" + chat_hi + R"(,"stream":true,"ignore_eos":true,"max_tokens":60})";
    req.prepare_payload();
    bhttp::write(st, req);
    char some[64];
    st.socket().read_some(net::buffer(some));  // the stream has started
  }  // the client hangs up
  for (int i = 0; i < 200 && s.srv.in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  BOOST_TEST(s.srv.in_flight() == 0u);
  BOOST_TEST(s.src->cancelled_ >= 1);
  BOOST_TEST(s.get("/health").status == 200);
  auto metrics = s.get("/metrics").body;
  BOOST_TEST(metrics.find("finished_reason=\"abort\"} 1") != std::string::npos, metrics);
}

BOOST_AUTO_TEST_CASE(queue_limit_is_429) {
  tandem::server_options opt;
  opt.max_pending = 1;
  live_server s(opt, std::chrono::milliseconds(20));
  // One request in flight fills the queue: the next is told to retry.
  std::thread slow([&] { s.post("/v1/completions", R"({"prompt":"x","max_tokens":10,"ignore_eos":true})"); });
  for (int i = 0; i < 100 && s.srv.in_flight() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  expect_error(s.post("/v1/completions", R"({"prompt":"x","max_tokens":1})"), 429);
  slow.join();
  BOOST_TEST(s.post("/v1/completions", R"({"prompt":"x","max_tokens":1})").status == 200);
}

BOOST_AUTO_TEST_CASE(more_sequences_than_can_ever_be_pending_is_400) {
  tandem::server_options opt;
  opt.max_pending = 1;
  live_server s(opt);
  const response r = s.post("/v1/completions", R"({"prompt":"x","n":2})");  // was a 429 no retry could cure
  expect_error(r, 400);
  BOOST_TEST(r.body.find("2 sequences") != std::string::npos, r.body);
  BOOST_TEST(r.body.find("at most 1 pending") != std::string::npos, r.body);
  expect_error(s.post("/v1/completions", R"({"prompt":["a","b"]})"), 400);
}

BOOST_AUTO_TEST_CASE(a_request_larger_than_the_kv_pool_is_400_at_once) {
  live_server s;
  s.src->pool_tokens_ = 40;  // smaller than the context (64)
  const auto t0 = std::chrono::steady_clock::now();
  const response r = s.post("/v1/completions", R"({"prompt":"abc","max_tokens":50})");
  BOOST_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  expect_error(r, 400);
  BOOST_TEST(r.body.find("holds 40 tokens") != std::string::npos, r.body);
  BOOST_TEST(r.body.find("needs 53") != std::string::npos, r.body);
  BOOST_TEST(json(r).at("error").at("param").as_string() == "max_tokens");
  expect_error(s.post("/v1/completions", R"({"prompt":")" + std::string(45, 'a') + R"("})"), 400);
  BOOST_TEST(s.src->submitted_ == 0, "a request that cannot fit reached the engine");
  // Within the pool it runs.
  BOOST_TEST(s.post("/v1/completions", R"({"prompt":"abc","max_tokens":5})").status == 200);
  BOOST_TEST(s.src->submitted_ == 1);
}

BOOST_AUTO_TEST_CASE(metrics_count) {
  live_server s;
  s.post("/v1/completions", R"({"prompt":"abc","max_tokens":5})");
  auto r = s.get("/metrics");
  BOOST_TEST(r.content_type.rfind("text/plain", 0) == 0u);
  for (const char* line : {"tandem:generation_tokens_total{model_name=\"fake-model\"} 5",
                           "tandem:prompt_tokens_total{model_name=\"fake-model\"} 3",
                           "tandem:request_success_total{model_name=\"fake-model\",finished_reason=\"length\"} 1",
                           "tandem:time_to_first_token_seconds_count{model_name=\"fake-model\"} 1",
                           "tandem:inter_token_latency_seconds_count{model_name=\"fake-model\"} 4",
                           "tandem:kv_cache_usage_perc{model_name=\"fake-model\"} 0.5",
                           "# TYPE tandem:e2e_request_latency_seconds histogram"})
    BOOST_TEST(r.body.find(line) != std::string::npos, line);
}

BOOST_AUTO_TEST_CASE(stop_finishes_in_flight_requests) {
  auto src = std::make_shared<fake_source>(std::string(50, 'a'), std::chrono::milliseconds(5));
  tandem::server_options opt;
  opt.port = 0;
  tandem::server srv(src, opt);
  const uint16_t port = srv.start();
  std::thread client([port] {
    net::io_context ioc;
    beast::tcp_stream st(ioc);
    st.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/v1/completions", 11};
    req.set(bhttp::field::host, "x");
    req.body() = R"({"prompt":"x","max_tokens":20})";
    req.prepare_payload();
    bhttp::write(st, req);
    bhttp::response<bhttp::string_body> res;
    beast::flat_buffer buf;
    bhttp::read(st, buf, res);
    BOOST_TEST(res.result_int() == 200u);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  srv.stop(std::chrono::seconds(5));  // waits for the request to finish
  client.join();
  BOOST_TEST(srv.in_flight() == 0u);
}
