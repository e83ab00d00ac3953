// The mock API server (tools/mock_api) over real loopback sockets: both API shapes, keep-alive,
// request framing, auth and bad bodies, server-side rate limits and their headers, streams,
// scripted and random fault injection, /stats, and the laneq-mock-api program.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include <nlohmann/json.hpp>

#include "laneq/rate_limit_headers.hpp"
#include "mock_api/mock_server.hpp"
#include "mock_api/mock_server_thread.hpp"
#include "mock_api/mock_stats.hpp"
#include "support/child_process.hpp"
#include "support/http_client.hpp"

using namespace std::chrono_literals;
using laneq::Headers;
using laneq::parse_rate_limit_headers;
using laneq::mock::MockConfig;
using laneq::mock::MockServer;
using laneq::mock::MockServerThread;
using laneq::test::HttpClient;
using laneq::test::HttpResponse;
using nlohmann::json;

namespace {

constexpr const char* chat_path = "/v1/chat/completions";
constexpr const char* messages_path = "/v1/messages";

Headers openai_auth(std::string key = "key-1") { return {{"authorization", "Bearer " + key}}; }

Headers anthropic_auth(std::string key = "key-1") {
  return {{"x-api-key", std::move(key)}, {"anthropic-version", "2023-06-01"}};
}

Headers with(Headers h, const Headers& more) {
  h.insert(h.end(), more.begin(), more.end());
  return h;
}

json openai_body(std::string text = "Hello", std::string model = "gpt-4o-mini") {
  return {{"model", std::move(model)},
          {"messages", json::array({{{"role", "user"}, {"content", std::move(text)}}})}};
}

json anthropic_body(std::string text = "Hello", std::string model = "claude-3-5-haiku",
                    int max_tokens = 100) {
  return {{"model", std::move(model)},
          {"max_tokens", max_tokens},
          {"messages", json::array({{{"role", "user"}, {"content", std::move(text)}}})}};
}

// The SSE events of a stream body: (event name or "", data).
std::vector<std::pair<std::string, std::string>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string event, data;
    std::size_t line_start = pos;
    while (line_start < end) {
      auto line_end = std::min(body.find('\n', line_start), end);
      const auto line = body.substr(line_start, line_end - line_start);
      if (line.rfind("event: ", 0) == 0) event = line.substr(7);
      if (line.rfind("data: ", 0) == 0) data = line.substr(6);
      line_start = line_end + 1;
    }
    out.emplace_back(event, data);
    pos = end + 2;
  }
  return out;
}

std::vector<std::string> event_names(const std::vector<std::pair<std::string, std::string>>& events) {
  std::vector<std::string> names;
  for (const auto& [name, data] : events)
    if (names.empty() || names.back() != name || name != "content_block_delta") names.push_back(name);
  return names;
}

std::int64_t count(const json& stats, const char* map, const std::string& key) {
  const auto& m = stats.at(map);
  return m.contains(key) ? m.at(key).get<std::int64_t>() : 0;
}

}  // namespace

// --- shapes --------------------------------------------------------------------------------

TEST_CASE("an OpenAI chat completion answers in the OpenAI shape, with usage") {
  MockServerThread server;
  HttpClient c(server.port());
  json body = {{"model", "gpt-4o-mini"},
               {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                         {{"role", "user"},
                                          {"content", "What is the capital of France, in one word please?"}}})},
               {"max_tokens", 64}};
  const auto r = c.post(chat_path, body, openai_auth());
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type") == "application/json");
  CHECK(r.header("x-request-id").has_value());
  const auto j = r.json();
  CHECK(j["object"] == "chat.completion");
  CHECK(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(j["model"] == "gpt-4o-mini");
  CHECK(j["created"].is_number_integer());
  CHECK(j["choices"][0]["index"] == 0);
  CHECK(j["choices"][0]["message"]["role"] == "assistant");
  // The first 40 bytes of the last user message.
  CHECK(j["choices"][0]["message"]["content"] == "mock reply to: What is the capital of France, in one wo");
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  // Prompt: 9 + 50 bytes of text -> 59 / 4 + 1 = 15 tokens; completion: the default 16.
  CHECK(j["usage"] == json{{"prompt_tokens", 15}, {"completion_tokens", 16}, {"total_tokens", 31}});

  body["max_tokens"] = 5;  // fewer than the default completion: cut short, "length"
  const auto short_answer = c.post(chat_path, body, openai_auth()).json();
  CHECK(short_answer["usage"]["completion_tokens"] == 5);
  CHECK(short_answer["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("an Anthropic message answers in the Anthropic shape, with usage") {
  MockConfig cfg;
  cfg.completion_tokens = 20;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  json body = {{"model", "claude-3-5-haiku"},
               {"max_tokens", 100},
               {"system", "Be brief."},
               {"messages", json::array({{{"role", "user"},
                                          {"content", json::array({{{"type", "text"}, {"text", "Hi there"}}})}}})}};
  const auto r = c.post(messages_path, body, anthropic_auth());
  REQUIRE(r.status == 200);
  CHECK(r.header("request-id").has_value());
  const auto j = r.json();
  CHECK(j["type"] == "message");
  CHECK(j["role"] == "assistant");
  CHECK(j["id"].get<std::string>().rfind("msg_", 0) == 0);
  CHECK(j["model"] == "claude-3-5-haiku");
  CHECK(j["content"] == json::array({{{"type", "text"}, {"text", "mock reply to: Hi there"}}}));
  CHECK(j["stop_reason"] == "end_turn");
  // Prompt: 9 + 8 bytes -> 17 / 4 + 1 = 5 tokens; completion: the configured 20.
  CHECK(j["usage"] == json{{"input_tokens", 5}, {"output_tokens", 20}});

  body["max_tokens"] = 3;
  const auto short_answer = c.post(messages_path, body, anthropic_auth()).json();
  CHECK(short_answer["usage"]["output_tokens"] == 3);
  CHECK(short_answer["stop_reason"] == "max_tokens");

  body.erase("max_tokens");  // required by the Messages API
  const auto missing = c.post(messages_path, body, anthropic_auth());
  CHECK(missing.status == 400);
  CHECK(missing.json()["error"]["type"] == "invalid_request_error");
}

// --- connections and framing ---------------------------------------------------------------

TEST_CASE("two requests share one keep-alive connection") {
  MockServerThread server;
  HttpClient c(server.port());
  const auto a = c.post(chat_path, openai_body("one"), openai_auth());
  const auto b = c.post(messages_path, anthropic_body("two"), anthropic_auth());
  REQUIRE(a.status == 200);
  REQUIRE(b.status == 200);
  CHECK(a.header("connection") == "keep-alive");
  CHECK(a.json()["choices"][0]["message"]["content"] == "mock reply to: one");
  CHECK(b.json()["content"][0]["text"] == "mock reply to: two");
  const auto s = server.stats();
  CHECK(s["requests"] == 2);
  CHECK(s["connections"]["accepted"] == 1);
  CHECK(s["connections"]["current"] == 1);
}

TEST_CASE("pipelined requests are answered in order on one connection") {
  MockServerThread server;
  HttpClient c(server.port());
  std::string two;
  for (const char* text : {"first", "second"}) {
    const auto body = openai_body(text).dump();
    two += "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\n"
           "content-length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  c.send_raw(two);
  CHECK(c.read_response().json()["choices"][0]["message"]["content"] == "mock reply to: first");
  CHECK(c.read_response().json()["choices"][0]["message"]["content"] == "mock reply to: second");
}

TEST_CASE("Connection: close is honoured: the server answers, then closes") {
  MockServerThread server;
  HttpClient c(server.port());
  const auto r = c.post(chat_path, openai_body(), with(openai_auth(), {{"connection", "close"}}));
  REQUIRE(r.status == 200);
  CHECK(r.header("connection") == "close");
  CHECK(c.read_until_closed() == asio::error::eof);
  CHECK(server.wait_stats([](const json& s) { return s["connections"]["current"] == 0; }));
}

TEST_CASE("a chunked request body is read, chunk extensions and all") {
  MockServerThread server;
  HttpClient c(server.port());
  const std::string body = openai_body("chunked hello").dump();
  std::string chunked;
  for (std::size_t i = 0; i < body.size(); i += 7) {
    const auto part = body.substr(i, 7);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", part.size());
    chunked += std::string(size) + (i == 0 ? ";ext=1" : "") + "\r\n" + part + "\r\n";
  }
  chunked += "0\r\n\r\n";
  const auto r = c.request("POST", chat_path,
                           with(openai_auth(), {{"transfer-encoding", "chunked"}}), chunked);
  REQUIRE(r.status == 200);
  CHECK(r.json()["choices"][0]["message"]["content"] == "mock reply to: chunked hello");
}

TEST_CASE("Expect: 100-continue gets an interim 100 before the body is sent") {
  MockServerThread server;
  HttpClient c(server.port());
  const std::string body = openai_body("after continue").dump();
  c.send_raw("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\n"
             "expect: 100-continue\r\ncontent-length: " + std::to_string(body.size()) + "\r\n\r\n");
  CHECK(c.read_head().status == 100);
  CHECK(server.wait_stats([](const json& s) { return s["connections"]["waited_for_body"] == 1; }));
  c.send_raw(body);
  const auto r = c.read_response();
  REQUIRE(r.status == 200);
  CHECK(r.json()["choices"][0]["message"]["content"] == "mock reply to: after continue");
}

TEST_CASE("an HTTP/1.0 stream comes unframed and ends with the close - its Expect gets no 100") {
  MockServerThread server;
  HttpClient c(server.port());
  json body = openai_body("old client");
  body["stream"] = true;
  const std::string text = body.dump();
  c.send_raw("POST /v1/chat/completions HTTP/1.0\r\nhost: x\r\nauthorization: Bearer k\r\n"
             "expect: 100-continue\r\ncontent-length: " + std::to_string(text.size()) + "\r\n\r\n");
  // Once the server has seen the head alone, a 100 Continue would have been written already
  // (it is written before the server waits for the body, which it counts).
  REQUIRE(server.wait_stats([](const json& s) { return s["connections"]["waited_for_body"] == 1; }));
  c.send_raw(text);
  auto r = c.read_head();
  REQUIRE(r.status == 200);  // not an interim 100: a 1.0 client cannot take one
  CHECK_FALSE(r.header("transfer-encoding").has_value());
  CHECK_FALSE(r.header("content-length").has_value());
  CHECK(r.header("connection") == "close");
  c.read_body(r);  // to the close
  CHECK(r.error == asio::error::eof);
  CHECK(r.body.rfind("data: {", 0) == 0);           // no chunk size before the first event
  CHECK(r.body.find("\r\n") == std::string::npos);  // nor anywhere else
  CHECK(r.body.find("data: [DONE]") != std::string::npos);
  CHECK(server.wait_stats([](const json& s) { return s["connections"]["current"] == 0; }));
}

TEST_CASE("a request body over the limit gets 413 and the connection closes") {
  MockConfig cfg;
  cfg.max_body_bytes = 1000;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  const auto r = c.post(chat_path, openai_body(std::string(2000, 'x')), openai_auth());
  CHECK(r.status == 413);
  CHECK(r.header("connection") == "close");
}

TEST_CASE("a chunked request whose trailer section passes 64 KiB gets 431 and the connection closes") {
  MockServerThread server;
  HttpClient c(server.port());
  std::string request = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n";
  for (int i = 0; i < 12'000; ++i) request += "a: b\r\n";  // 72 KB of short lines, each within limits
  request += "\r\n";
  c.send_raw(request);
  const auto r = c.read_response();
  REQUIRE(r.status == 431);
  CHECK(r.header("connection") == "close");
  CHECK(c.read_until_closed() == asio::error::eof);
}

TEST_CASE("tiny chunks with long extensions get 413 once the wire bytes pass the body limit + 64 KiB") {
  MockConfig cfg;
  cfg.max_body_bytes = 1024;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  std::string request = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
  const std::string chunk = "1;ext=" + std::string(990, 'x') + "\r\na\r\n";
  for (int i = 0; i < 100; ++i) request += chunk;  // 100 KB on the wire for a 100-byte body
  request += "0\r\n\r\n";
  c.send_raw(request);
  const auto r = c.read_response();
  REQUIRE(r.status == 413);
  CHECK(r.header("connection") == "close");
  CHECK(c.read_until_closed() == asio::error::eof);
}

TEST_CASE("latency delays the answer by at least the configured time") {
  MockConfig cfg;
  cfg.latency = 150ms;
  cfg.jitter = 50ms;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(c.post(chat_path, openai_body(), openai_auth()).status == 200);
  CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);
}

// --- auth, bad requests, routing ------------------------------------------------------------

TEST_CASE("a call without an API key gets 401 in the provider's error shape") {
  MockServerThread server;
  HttpClient c(server.port());

  const auto openai = c.post(chat_path, openai_body());
  CHECK(openai.status == 401);
  CHECK(openai.json()["error"]["type"] == "invalid_request_error");
  CHECK(openai.json()["error"]["code"] == "invalid_api_key");
  CHECK(openai.json()["error"]["message"].is_string());
  CHECK(c.post(chat_path, openai_body(), {{"authorization", "Basic abc"}}).status == 401);

  const auto no_key = c.post(messages_path, anthropic_body(), {{"anthropic-version", "2023-06-01"}});
  CHECK(no_key.status == 401);
  CHECK(no_key.json()["type"] == "error");
  CHECK(no_key.json()["error"]["type"] == "authentication_error");
  CHECK(server.stats()["by_status"]["401"] == 3);
}

TEST_CASE("an Anthropic call without a valid anthropic-version gets 400, as the API answers") {
  MockServerThread server;
  HttpClient c(server.port());
  const auto no_version = c.post(messages_path, anthropic_body(), {{"x-api-key", "k"}});
  CHECK(no_version.status == 400);
  CHECK(no_version.json()["type"] == "error");
  CHECK(no_version.json()["error"]["type"] == "invalid_request_error");
  CHECK(no_version.json()["error"]["message"] == "anthropic-version: header is required");
  const auto bad = c.post(messages_path, anthropic_body(),
                          {{"x-api-key", "k"}, {"anthropic-version", "2024-10-22"}});
  CHECK(bad.status == 400);
  CHECK(bad.json()["error"]["message"] == "anthropic-version: \"2024-10-22\" is not a valid version");
  // no key and no version: the key is checked first
  CHECK(c.post(messages_path, anthropic_body()).status == 401);
  for (const char* v : {"2023-06-01", "2023-01-01"})
    CHECK(c.post(messages_path, anthropic_body(), {{"x-api-key", "k"}, {"anthropic-version", v}})
              .status == 200);
  CHECK(server.stats()["by_status"]["400"] == 2);
}

TEST_CASE("a body that is not JSON gets 400 in the provider's error shape, the connection lives on") {
  MockServerThread server;
  HttpClient c(server.port());
  const auto openai = c.request("POST", chat_path, openai_auth(), "{\"model\": ");
  CHECK(openai.status == 400);
  CHECK(openai.json()["error"]["type"] == "invalid_request_error");
  const auto anthropic = c.request("POST", messages_path, anthropic_auth(), "not json");
  CHECK(anthropic.status == 400);
  CHECK(anthropic.json()["type"] == "error");
  CHECK(anthropic.json()["error"]["type"] == "invalid_request_error");
  CHECK(c.post(chat_path, openai_body(), openai_auth()).status == 200);
}

TEST_CASE("unknown paths get 404 and GET /stats answers JSON") {
  MockServerThread server;
  HttpClient c(server.port());
  CHECK(c.post("/v1/embeddings", json::object(), openai_auth()).status == 404);
  CHECK(c.request("GET", chat_path, openai_auth()).status == 404);
  const auto stats = c.request("GET", "/stats");
  REQUIRE(stats.status == 200);
  CHECK(stats.json()["by_status"]["404"] == 2);
}

TEST_CASE("header values that are not UTF-8 are counted, and /stats still answers valid JSON") {
  MockServerThread server;
  HttpClient c(server.port());
  const auto r = c.post(chat_path, openai_body(),
                        with(openai_auth("k\xE9y"), {{"x-client", "caf\xE9"}, {"x-priority", "\xFF"},
                                                     {"x-request-id", "r\xE9"}, {"x-laneq-id", "l\xE9"}}));
  CHECK(r.status == 200);
  const auto stats = c.request("GET", "/stats");
  REQUIRE(stats.status == 200);
  const auto s = json::parse(stats.body);  // the stray bytes came out as U+FFFD
  CHECK(s["requests"] == 1);
  REQUIRE(s["by_client"].size() == 1);
  CHECK(s["by_client"].begin().key().rfind("caf", 0) == 0);
}

TEST_CASE("a path that is not UTF-8 gets 404, not a dropped connection") {
  MockServerThread server;
  HttpClient c(server.port());
  c.send_raw("GET /\xFF HTTP/1.1\r\nhost: x\r\n\r\n");
  const auto r = c.read_response();
  REQUIRE(r.status == 404);
  CHECK(r.json()["error"]["code"] == "unknown_url");
  CHECK(c.request("GET", "/stats").status == 200);  // with that path among by_path's keys
}

// --- rate limits ----------------------------------------------------------------------------

TEST_CASE("the rpm bucket answers 429 with both header families, which laneq parses") {
  MockConfig cfg;
  cfg.rpm = 2;
  MockServerThread server(cfg);
  HttpClient c(server.port());

  SECTION("OpenAI") {
    const auto first = c.post(chat_path, openai_body(), openai_auth("a"));
    REQUIRE(first.status == 200);
    auto info = parse_rate_limit_headers(first.headers, std::chrono::system_clock::now());
    CHECK(info.requests.limit == 2);
    CHECK(info.requests.remaining == 1);
    REQUIRE(info.requests.reset_after);
    CHECK(*info.requests.reset_after > 0ns);
    CHECK(*info.requests.reset_after <= 60s);
    CHECK(info.tokens.limit.has_value());  // the tokens headers come too (unlimited here)

    REQUIRE(c.post(chat_path, openai_body(), openai_auth("a")).status == 200);
    const auto limited = c.post(chat_path, openai_body(), openai_auth("a"));
    REQUIRE(limited.status == 429);
    CHECK(limited.json()["error"]["code"] == "rate_limit_exceeded");
    CHECK(limited.json()["error"]["type"] == "requests");
    info = parse_rate_limit_headers(limited.headers, std::chrono::system_clock::now());
    CHECK(info.requests.remaining == 0);
    // One request comes back every 30 s; the first was taken moments ago.
    REQUIRE(info.retry_after);
    CHECK(*info.retry_after > 25s);
    CHECK(*info.retry_after <= 30s);
    CHECK(limited.header("retry-after") == "30");

    // Buckets are per API key.
    CHECK(c.post(chat_path, openai_body(), openai_auth("b")).status == 200);
  }
  SECTION("Anthropic") {
    REQUIRE(c.post(messages_path, anthropic_body(), anthropic_auth("a")).status == 200);
    REQUIRE(c.post(messages_path, anthropic_body(), anthropic_auth("a")).status == 200);
    const auto limited = c.post(messages_path, anthropic_body(), anthropic_auth("a"));
    REQUIRE(limited.status == 429);
    CHECK(limited.json()["type"] == "error");
    CHECK(limited.json()["error"]["type"] == "rate_limit_error");
    const auto info = parse_rate_limit_headers(limited.headers, std::chrono::system_clock::now());
    CHECK(info.requests.limit == 2);
    CHECK(info.requests.remaining == 0);
    REQUIRE(info.requests.reset_after);  // RFC 3339, whole seconds rounded up
    CHECK(*info.requests.reset_after > 55s);
    CHECK(*info.requests.reset_after <= 61s);
    CHECK(info.tokens.limit.has_value());
    CHECK(info.input_tokens.limit.has_value());
    CHECK(info.output_tokens.limit.has_value());
    REQUIRE(info.retry_after);
    CHECK(*info.retry_after > 25s);
    CHECK(*info.retry_after <= 30s);
  }
  const auto s = server.stats();
  CHECK(s["sent_429"] == 1);
  CHECK(s["by_status"]["429"] == 1);
}

TEST_CASE("rpm_slice enforces a minute's limit in short slices too - the headers show the "
          "minute's bucket, the 429 the slice's wait") {
  MockConfig cfg;
  cfg.rpm = 60;                                     // 1 per second
  cfg.rpm_slice = std::chrono::milliseconds(5000);  // so at most 5 at once
  MockServerThread server(cfg);
  HttpClient c(server.port());
  // (5 calls well within the second that refills one, even under a sanitizer)
  for (int i = 0; i < 5; ++i) REQUIRE(c.post(chat_path, openai_body(), openai_auth()).status == 200);
  const auto limited = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(limited.status == 429);
  CHECK(limited.json()["error"]["type"] == "requests");
  const auto info = parse_rate_limit_headers(limited.headers, std::chrono::system_clock::now());
  CHECK(info.requests.limit == 60);
  CHECK(info.requests.remaining >= 55);  // the minute's bucket: 55 of 60 left (56 after a
  CHECK(info.requests.remaining <= 56);  // slow second), not the slice's 0
  REQUIRE(info.retry_after);
  CHECK(*info.retry_after <= 1s);  // one request comes back every second
  CHECK(server.stats()["sent_429"] == 1);
  CHECK_THROWS_AS(MockServerThread(MockConfig{.rpm = 1, .rpm_slice = std::chrono::minutes(2)}),
                  std::invalid_argument);
}

TEST_CASE("the tpm bucket charges prompt + max_tokens up front and takes back what was unused") {
  MockConfig cfg;
  cfg.tpm = 100;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  json body = openai_body("hi");  // 2 bytes: 1 prompt token
  body["max_tokens"] = 50;        // charge 51; the answer uses 16, 34 come back

  const auto first = c.post(chat_path, body, openai_auth());
  REQUIRE(first.status == 200);
  CHECK(first.header("x-ratelimit-limit-tokens") == "100");
  CHECK(first.header("x-ratelimit-remaining-tokens") == "49");

  // Same connection: the first call's refund happened before the second was read.
  const auto second = c.post(chat_path, body, openai_auth());
  REQUIRE(second.status == 200);
  const auto remaining = std::stoi(second.header("x-ratelimit-remaining-tokens").value());
  CHECK(remaining >= 32);  // 49 + 34 - 51, plus what refilled meanwhile
  CHECK(remaining <= 34);

  // 66 left once the second call gave back its 34; a charge of 91 is 25 short.
  body["max_tokens"] = 90;
  const auto limited = c.post(chat_path, body, openai_auth());
  REQUIRE(limited.status == 429);
  CHECK(limited.json()["error"]["type"] == "tokens");
  const auto retry_ms = std::stoi(limited.header("retry-after-ms").value());
  CHECK(retry_ms > 12'000);  // 25 tokens at 100 per minute: 15 s, less what refilled meanwhile
  CHECK(retry_ms <= 15'000);

  body["max_tokens"] = 500;  // more than the whole budget: it could never run
  const auto too_large = c.post(chat_path, body, openai_auth());
  REQUIRE(too_large.status == 429);
  CHECK(too_large.json()["error"]["message"].get<std::string>().rfind("Request too large", 0) == 0);
  CHECK_FALSE(too_large.header("retry-after").has_value());
}

TEST_CASE("a max_tokens of 2^63 - 1 is a charge that can never fit, not one that wraps negative") {
  MockConfig cfg;
  cfg.tpm = 1000;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  json openai = openai_body();
  openai["max_tokens"] = std::numeric_limits<std::int64_t>::max();
  const auto r = c.post(chat_path, openai, openai_auth());
  REQUIRE(r.status == 429);
  const auto message = r.json()["error"]["message"].get<std::string>();
  CHECK(message.rfind("Request too large", 0) == 0);
  CHECK(message.find("Requested 9223372036854775807.") != std::string::npos);  // saturated
  CHECK_FALSE(r.header("retry-after").has_value());

  json anthropic = anthropic_body();
  anthropic["max_tokens"] = std::numeric_limits<std::int64_t>::max();
  const auto a = c.post(messages_path, anthropic, anthropic_auth());
  REQUIRE(a.status == 429);
  CHECK(a.json()["error"]["type"] == "rate_limit_error");
  CHECK_FALSE(a.header("retry-after").has_value());
  CHECK(server.stats()["usage"]["completion_tokens"] == 0);  // neither ran
}

TEST_CASE("with rate_limit_headers_on_429 off, a 429 carries no rate-limit headers") {
  MockConfig cfg;
  cfg.rpm = 1;
  cfg.rate_limit_headers_on_429 = false;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  const auto ok = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(ok.status == 200);
  CHECK(ok.header("x-ratelimit-remaining-requests") == "0");
  const auto limited = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(limited.status == 429);
  for (const auto& [name, value] : limited.headers) {
    INFO(name);
    CHECK(name.rfind("x-ratelimit-", 0) != 0);
    CHECK(name.rfind("retry-after", 0) != 0);
  }
}

TEST_CASE("round_anthropic_tokens rounds token counts left to the nearest thousand, as the API "
          "does, and laneq reads them as the least they can mean") {
  MockConfig cfg;
  cfg.rpm = 50;
  cfg.input_tpm = 10'000;
  cfg.output_tpm = 10'000;
  cfg.round_anthropic_tokens = true;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  // Charged up front: 400 output tokens (9,600 left: 10000 when rounded to the nearest 1000,
  // 9000 when rounded down) and 2 prompt tokens (9,998: 10000).
  const auto r = c.post(messages_path, anthropic_body("Hello", "claude-3-5-haiku", 400),
                        anthropic_auth());
  REQUIRE(r.status == 200);
  CHECK(r.header("anthropic-ratelimit-output-tokens-remaining") == "10000");
  CHECK(r.header("anthropic-ratelimit-input-tokens-remaining") == "10000");
  CHECK(r.header("anthropic-ratelimit-requests-remaining") == "49");  // requests: exact
  const auto info = parse_rate_limit_headers(r.headers, std::chrono::system_clock::now());
  CHECK(info.output_tokens.remaining == 9500);
  CHECK(info.input_tokens.remaining == 9500);
  CHECK(info.requests.remaining == 49);
}

// --- streams --------------------------------------------------------------------------------

TEST_CASE("an OpenAI stream sends content chunks, a usage chunk with include_usage, then [DONE]") {
  MockServerThread server;
  HttpClient c(server.port());
  json body = openai_body("stream me");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const auto r = c.post(chat_path, body, openai_auth());
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type") == "text/event-stream");
  CHECK(r.chunked);
  CHECK(r.complete);
  const auto events = sse_events(r.body);
  REQUIRE(events.size() >= 5);
  CHECK(events.back().second == "[DONE]");
  const auto usage_chunk = json::parse(events[events.size() - 2].second);
  CHECK(usage_chunk["choices"].empty());
  CHECK(usage_chunk["usage"]["completion_tokens"] == 16);
  CHECK(usage_chunk["usage"]["total_tokens"] == usage_chunk["usage"]["prompt_tokens"].get<int>() + 16);
  std::string text;
  int content_chunks = 0;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const auto chunk = json::parse(events[i].second);
    CHECK(chunk["object"] == "chat.completion.chunk");
    const auto& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && !delta["content"].get<std::string>().empty()) {
      text += delta["content"].get<std::string>();
      ++content_chunks;
    }
  }
  CHECK(text == "mock reply to: stream me");
  CHECK(content_chunks >= 3);
  CHECK(json::parse(events[events.size() - 3].second)["choices"][0]["finish_reason"] == "stop");

  body.erase("stream_options");  // without include_usage: no usage chunk
  const auto plain = sse_events(c.post(chat_path, body, openai_auth()).body);
  CHECK(plain.back().second == "[DONE]");
  for (std::size_t i = 0; i + 1 < plain.size(); ++i)
    CHECK_FALSE(json::parse(plain[i].second).contains("usage"));
}

TEST_CASE("an Anthropic stream sends its events in order, with a ping") {
  MockServerThread server;
  HttpClient c(server.port());
  json body = anthropic_body("stream me too");
  body["stream"] = true;
  const auto r = c.post(messages_path, body, anthropic_auth());
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type") == "text/event-stream");
  CHECK(r.complete);
  const auto events = sse_events(r.body);
  CHECK(event_names(events) == std::vector<std::string>{"message_start", "content_block_start", "ping",
                                                        "content_block_delta", "content_block_stop",
                                                        "message_delta", "message_stop"});
  std::string text;
  int deltas = 0;
  for (const auto& [name, data] : events) {
    const auto j = json::parse(data);
    CHECK(j["type"] == name);  // every data object names its event
    if (name == "message_start") CHECK(j["message"]["usage"]["input_tokens"] == 4);
    if (name == "content_block_delta") {
      CHECK(j["delta"]["type"] == "text_delta");
      text += j["delta"]["text"].get<std::string>();
      ++deltas;
    }
    if (name == "message_delta") {
      CHECK(j["usage"]["output_tokens"] == 16);
      CHECK(j["delta"]["stop_reason"] == "end_turn");
    }
  }
  CHECK(text == "mock reply to: stream me too");
  CHECK(deltas >= 3);
}

TEST_CASE("stream faults: an error event mid-stream, and streams cut before their final events") {
  MockServerThread server;
  server.script(laneq::mock::outcomes_from_json(
      json::parse(R"([{"kind":"stream_error"},{"kind":"stream_cut"},{"kind":"stream_cut"}])")));

  json anthropic = anthropic_body("faulty stream");
  anthropic["stream"] = true;
  {
    HttpClient c(server.port());
    const auto r = c.post(messages_path, anthropic, anthropic_auth());
    REQUIRE(r.status == 200);
    CHECK(r.complete);  // the body ends properly: the failure is in the events
    const auto events = sse_events(r.body);
    const auto names = event_names(events);
    REQUIRE(names.size() >= 2);
    CHECK(names.back() == "error");
    CHECK(names[names.size() - 2] == "content_block_delta");  // after some content
    CHECK(json::parse(events.back().second)["error"]["type"] == "overloaded_error");
  }
  {
    HttpClient c(server.port());
    const auto r = c.post(messages_path, anthropic, anthropic_auth());
    REQUIRE(r.status == 200);
    CHECK_FALSE(r.complete);
    const auto names = event_names(sse_events(r.body));
    CHECK(std::find(names.begin(), names.end(), "content_block_delta") != names.end());
    CHECK(std::find(names.begin(), names.end(), "message_delta") == names.end());
    CHECK(std::find(names.begin(), names.end(), "message_stop") == names.end());
  }
  {
    json openai = openai_body("faulty stream");
    openai["stream"] = true;
    openai["stream_options"] = {{"include_usage", true}};
    HttpClient c(server.port());
    const auto r = c.post(chat_path, openai, openai_auth());
    REQUIRE(r.status == 200);
    CHECK_FALSE(r.complete);
    const auto events = sse_events(r.body);
    REQUIRE_FALSE(events.empty());
    for (const auto& [name, data] : events) {
      REQUIRE(data != "[DONE]");
      const auto chunk = json::parse(data);
      CHECK_FALSE(chunk["choices"].empty());      // no usage chunk
      CHECK(chunk["choices"][0]["finish_reason"].is_null());
    }
  }
  CHECK(server.stats()["injected"] == json{{"stream_cut", 2}, {"stream_error", 1}});
}

// --- scripted and random outcomes -----------------------------------------------------------

TEST_CASE("scripted outcomes force an exact sequence of answers") {
  MockServerThread server;
  HttpClient control(server.port());
  const auto queued = control.post("/control/script", json::parse(R"([
      {"status": 429, "retry_after_ms": 300},
      {"kind": "reset"},
      {"status": 529},
      {"kind": "insufficient_quota"},
      {"kind": "too_large"},
      {"kind": "error", "status": 503, "should_retry": false},
      {"kind": "malformed"},
      {"status": 429, "headers": false}
  ])"));
  REQUIRE(queued.status == 200);
  CHECK(queued.json()["queued"] == 8);
  CHECK(control.post("/control/script", json::parse(R"([{"kind": "nonsense"}])")).status == 400);

  HttpClient c(server.port());
  const auto limited = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(limited.status == 429);
  CHECK(limited.header("retry-after-ms") == "300");
  CHECK(limited.header("retry-after") == "1");
  CHECK(limited.json()["error"]["code"] == "rate_limit_exceeded");

  const auto reset = c.post(chat_path, openai_body(), openai_auth());
  CHECK(reset.status == 0);
  CHECK(reset.error == asio::error::connection_reset);

  HttpClient c2(server.port());
  const auto overloaded = c2.post(messages_path, anthropic_body(), anthropic_auth());
  CHECK(overloaded.status == 529);
  CHECK(overloaded.json()["error"]["type"] == "overloaded_error");

  const auto quota = c2.post(chat_path, openai_body(), openai_auth());
  CHECK(quota.status == 429);
  CHECK(quota.json()["error"]["code"] == "insufficient_quota");
  CHECK(quota.json()["error"]["type"] == "insufficient_quota");

  const auto too_large = c2.post(messages_path, anthropic_body(), anthropic_auth());
  CHECK(too_large.status == 413);
  CHECK(too_large.json()["error"]["type"] == "request_too_large");

  const auto unavailable = c2.post(chat_path, openai_body(), openai_auth());
  CHECK(unavailable.status == 503);
  CHECK(unavailable.header("x-should-retry") == "false");

  const auto malformed = c2.post(chat_path, openai_body(), openai_auth());
  CHECK(malformed.status == 200);
  CHECK(malformed.complete);
  CHECK_FALSE(json::accept(malformed.body));

  const auto bare = c2.post(chat_path, openai_body(), openai_auth());
  CHECK(bare.status == 429);
  CHECK_FALSE(bare.header("x-ratelimit-limit-requests").has_value());
  CHECK_FALSE(bare.header("retry-after").has_value());

  CHECK(c2.post(chat_path, openai_body(), openai_auth()).status == 200);  // script used up

  const auto s = server.stats();
  CHECK(s["resets"] == 1);
  CHECK(s["sent_429"] == 3);
  CHECK(s["sent_5xx"] == 2);
  CHECK(s["injected"]["malformed"] == 1);
  CHECK(s["requests"] == 9);
}

TEST_CASE("a scripted retry-after goes with any error answer, headers false drops it, and an "
          "answer that is no error refuses it") {
  MockServerThread server;
  HttpClient control(server.port());
  REQUIRE(control.post("/control/script", json::parse(R"([
      {"status": 503, "retry_after": 2},
      {"kind": "error", "status": 529, "retry_after_ms": 1500},
      {"status": 429, "retry_after_ms": 300, "headers": false}
  ])")).status == 200);
  HttpClient c(server.port());
  const auto unavailable = c.post(chat_path, openai_body(), openai_auth());
  CHECK(unavailable.status == 503);
  CHECK(unavailable.header("retry-after") == "2");
  CHECK_FALSE(unavailable.header("retry-after-ms").has_value());
  const auto overloaded = c.post(messages_path, anthropic_body(), anthropic_auth());
  CHECK(overloaded.status == 529);
  CHECK(overloaded.header("retry-after-ms") == "1500");
  CHECK(overloaded.header("retry-after") == "2");
  const auto bare = c.post(chat_path, openai_body(), openai_auth());
  CHECK(bare.status == 429);
  CHECK_FALSE(bare.header("retry-after").has_value());
  CHECK_FALSE(bare.header("retry-after-ms").has_value());
  for (const char* outcome : {R"({"kind": "ok", "retry_after": 1})",
                              R"({"status": 200, "retry_after_ms": 5})",
                              R"({"kind": "malformed", "retry_after": 1})"}) {
    INFO(outcome);
    const auto r = control.post("/control/script", json::parse(outcome));
    CHECK(r.status == 400);
    CHECK_THAT(r.json()["error"]["message"].get<std::string>(),
               Catch::Contains("need an error outcome"));
  }
}

TEST_CASE("scripted outcomes with a status or a delay out of range are refused, not wrapped") {
  MockServerThread server;
  HttpClient c(server.port());
  for (const char* outcome : {R"({"status": 4294967725})",  // 2^32 + 429
                              R"({"status": 18446744073709551615})",
                              R"({"latency_ms": 9000000000000000000})",
                              R"({"status": 429, "retry_after_ms": 9223372036854775807})",
                              R"({"status": 429, "retry_after": 9223372036854775807})"}) {
    INFO(outcome);
    const auto r = c.post("/control/script", json::parse(outcome));
    CHECK(r.status == 400);
    CHECK(r.json()["error"]["message"].get<std::string>().rfind("script outcome: ", 0) == 0);
  }
  const auto day = c.post("/control/script", json::parse(R"({"status": 429, "retry_after": 86400})"));
  REQUIRE(day.status == 200);
  CHECK(day.json()["pending"] == 1);  // none of the refused ones was queued
  const auto limited = c.post(chat_path, openai_body(), openai_auth());
  CHECK(limited.status == 429);
  CHECK(limited.header("retry-after") == "86400");
}

TEST_CASE("outcomes scripted in code and in-process configs are held to the same bounds - "
          "milliseconds::max() as \"never answer\" is refused, not wrapped to an answer at once") {
  using std::chrono::milliseconds;
  MockServerThread server;
  laneq::mock::MockOutcome slow;
  slow.latency = milliseconds::max();
  laneq::mock::MockOutcome fine;
  fine.latency = milliseconds(5);
  CHECK_THROWS_AS(server.script({fine, slow}), std::invalid_argument);
  laneq::mock::MockOutcome bad_status;
  bad_status.kind = laneq::mock::OutcomeKind::error;
  bad_status.status = 200;
  CHECK_THROWS_AS(server.script({bad_status}), std::invalid_argument);
  laneq::mock::MockOutcome late;
  late.kind = laneq::mock::OutcomeKind::rate_limit;
  late.retry_after_ms = milliseconds(-1);
  CHECK_THROWS_AS(server.script({late}), std::invalid_argument);
  // all or none: the good one was not queued either (an empty script answers the count)
  CHECK(HttpClient(server.port()).post("/control/script", json::array()).json()["pending"] == 0);
  asio::io_context io;
  for (auto cfg : {laneq::mock::MockConfig{.latency = milliseconds::max()},
                   laneq::mock::MockConfig{.jitter = milliseconds::max()},
                   laneq::mock::MockConfig{.stream_chunk_delay = milliseconds::max()}})
    CHECK_THROWS_AS(MockServer(io, cfg), std::invalid_argument);
  CHECK_NOTHROW(MockServer(io, {.latency = std::chrono::hours(24 * 365)}));
}

TEST_CASE("a stalled answer holds the call until the client gives up, which the server counts") {
  MockServerThread server;
  server.script({laneq::mock::MockOutcome{.kind = laneq::mock::OutcomeKind::stall}});
  HttpClient c(server.port());
  c.send("POST", chat_path, openai_auth(), openai_body().dump());
  const auto head = c.read_head();
  CHECK(head.status == 200);
  REQUIRE(server.wait_stats([](const json& s) { return s["in_flight"] == 1 && s["injected"]["stall"] == 1; }));
  CHECK(server.stats()["connections"]["closed_in_flight"] == 0);
  c.close();
  CHECK(server.wait_stats([](const json& s) {
    return s["connections"]["closed_in_flight"] == 1 && s["in_flight"] == 0;
  }));
}

TEST_CASE("a client that hangs up during the latency is counted at once, not after it") {
  MockConfig cfg;
  cfg.latency = 60s;  // the server would answer in a minute; stop() cuts it short at the end
  MockServerThread server(cfg);
  HttpClient c(server.port());
  c.send("POST", chat_path, openai_auth(), openai_body().dump());
  REQUIRE(server.wait_stats([](const json& s) { return s["in_flight"] == 1; }));
  c.close();
  CHECK(server.wait_stats([](const json& s) { return s["connections"]["closed_in_flight"] == 1; }, 10s));
  CHECK(server.stats()["by_status"].empty());  // nothing was sent
}

TEST_CASE("random injection is reproducible from the seed") {
  const auto statuses = [](std::uint64_t seed) {
    MockConfig cfg;
    cfg.seed = seed;
    cfg.error_rate_500 = 0.5;
    cfg.should_retry = true;
    MockServerThread server(cfg);
    HttpClient c(server.port());
    std::vector<int> out;
    for (int i = 0; i < 24; ++i) {
      const auto r = c.post(chat_path, openai_body(), openai_auth());
      if (r.status == 500) {
        CHECK(r.header("x-should-retry") == "true");
        CHECK(r.json()["error"]["type"] == "server_error");
      } else {
        CHECK_FALSE(r.header("x-should-retry").has_value());  // only on errors
      }
      out.push_back(r.status);
    }
    CHECK(server.stats()["sent_5xx"] == std::count(out.begin(), out.end(), 500));
    return out;
  };
  const auto a = statuses(7);
  CHECK(a == statuses(7));
  CHECK(a != statuses(8));
  const auto failures = std::count(a.begin(), a.end(), 500);
  CHECK(failures >= 4);
  CHECK(failures <= 20);
}

TEST_CASE("a reset starts the injection draws again from the seed") {
  MockConfig cfg;
  cfg.seed = 7;
  cfg.error_rate_500 = 0.5;
  MockServerThread server(cfg);
  HttpClient c(server.port());
  const auto draw = [&] {
    std::vector<int> out;
    for (int i = 0; i < 24; ++i) out.push_back(c.post(chat_path, openai_body(), openai_auth()).status);
    return out;
  };
  const auto first = draw();
  CHECK(std::count(first.begin(), first.end(), 500) >= 4);
  REQUIRE(c.post("/control/reset", json::object()).status == 200);
  CHECK(draw() == first);
}

// --- stats ----------------------------------------------------------------------------------

TEST_CASE("/stats counts per model, priority, client, key and request id, 429s and the busiest second") {
  MockServerThread server;
  server.script({{}, {}, {}, {}, laneq::mock::MockOutcome{.kind = laneq::mock::OutcomeKind::rate_limit}});
  HttpClient c(server.port());
  const auto t0 = std::chrono::steady_clock::now();
  c.post(chat_path, openai_body("a", "gpt-4o-mini"),
         with(openai_auth("k1"), {{"x-priority", "high"}, {"x-client", "tenant-a"}, {"x-laneq-id", "id-1"}}));
  c.post(chat_path, openai_body("b", "gpt-4o-mini"),
         with(openai_auth("k1"), {{"x-priority", "low"}, {"x-client", "tenant-b"}, {"x-laneq-id", "id-1"}}));
  c.post(messages_path, anthropic_body("c", "claude-x"),
         with(anthropic_auth("k2"), {{"x-priority", "high"}, {"x-client", "tenant-a"}, {"x-request-id", "id-2"}}));
  c.post(chat_path, openai_body("d", "gpt-4o"), with(openai_auth("k1"), {{"x-priority", "critical"}}));
  const auto limited = c.post(chat_path, openai_body("e", "gpt-4o"), openai_auth("k3"));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  CHECK(limited.status == 429);

  const auto s = c.request("GET", "/stats").json();
  CHECK(s["requests"] == 5);
  CHECK(count(s, "by_path", chat_path) == 4);
  CHECK(count(s, "by_path", messages_path) == 1);
  CHECK(count(s, "by_model", "gpt-4o-mini") == 2);
  CHECK(count(s, "by_model", "gpt-4o") == 2);
  CHECK(count(s, "by_model", "claude-x") == 1);
  CHECK(count(s, "by_priority", "high") == 2);
  CHECK(count(s, "by_priority", "low") == 1);
  CHECK(count(s, "by_priority", "critical") == 1);
  CHECK(count(s, "by_client", "tenant-a") == 2);
  CHECK(count(s, "by_client", "tenant-b") == 1);
  CHECK(count(s, "by_api_key", "k1") == 3);
  CHECK(count(s, "by_api_key", "k2") == 1);
  CHECK(count(s, "by_request_id", "id-1") == 2);
  CHECK(count(s, "by_request_id", "id-2") == 1);
  CHECK(s["duplicate_request_ids"] == 1);
  CHECK(s["sent_429"] == 1);
  CHECK(count(s, "by_status", "200") == 4);
  CHECK(s["usage"]["completion_tokens"] == 4 * 16);
  CHECK(s["max_in_60s"] == 5);
  if (elapsed < 900ms) CHECK(s["max_in_1s"] == 5);  // all five inside one second
  CHECK(s["max_in_1s"] >= 1);
  CHECK(s["peak_in_flight"] == 1);  // one connection, one call at a time
  CHECK(s["connections"]["accepted"] == 1);
  CHECK(s["connections"]["peak"] == 1);

  REQUIRE(c.post("/control/reset", json::object()).status == 200);
  const auto cleared = server.stats();
  CHECK(cleared["requests"] == 0);
  CHECK(cleared["by_model"].empty());
  CHECK(cleared["max_in_1s"] == 0);
  CHECK(cleared["connections"]["current"] == 1);  // still open
}

TEST_CASE("by_status counts answers to API calls only, not to /stats or /control/*") {
  MockServerThread server;
  HttpClient c(server.port());
  REQUIRE(c.post("/control/reset", json::object()).status == 200);
  CHECK(c.request("GET", "/stats").json()["by_status"].empty());
  CHECK(c.request("GET", "/control/nothing").status == 404);
  CHECK(c.request("GET", "/stats").json()["by_status"].empty());  // the first /stats was not counted
  REQUIRE(c.post(chat_path, openai_body(), openai_auth()).status == 200);
  const auto s = c.request("GET", "/stats").json();
  CHECK(s["by_status"] == json{{"200", 1}});
  CHECK(s["sent_429"] == 0);
}

TEST_CASE("the busiest 1 s window counts concurrent callers on many connections") {
  MockConfig cfg;
  cfg.latency = 3000ms;  // so the callers surely overlap: all six are in flight together
  MockServerThread server(cfg);
  std::vector<int> statuses(6, 0);
  std::vector<std::thread> callers;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < statuses.size(); ++i)
    callers.emplace_back([&, i] {  // no Catch2 assertions off the main thread
      HttpClient c(server.port());
      statuses[i] = c.post(chat_path, openai_body(), openai_auth()).status;
    });
  const bool together = server.wait_stats([](const json& s) { return s["in_flight"] == 6; });
  const auto all_started = std::chrono::steady_clock::now() - t0;
  for (auto& t : callers) t.join();
  REQUIRE(together);
  CHECK(statuses == std::vector<int>(6, 200));
  const auto s = server.stats();
  CHECK(s["requests"] == 6);
  CHECK(s["connections"]["accepted"] == 6);
  if (all_started < 900ms) CHECK(s["max_in_1s"] == 6);  // (they all started within 1 s)
  CHECK(s["max_in_1s"] >= 1);
  CHECK(s["max_in_60s"] == 6);
  CHECK(s["peak_in_flight"] == 6);
  CHECK(s["connections"]["peak"] == 6);
}

TEST_CASE("the busiest-window counts on a given clock - windows of 1 s and 60 s, ends excluded") {
  // The two tests above check these counts only when their run was fast enough; here the
  // arithmetic is checked on times of the test's choosing.
  laneq::mock::MockStats stats(100);
  const std::chrono::steady_clock::time_point t0{std::chrono::hours(1)};
  const laneq::mock::CallInfo call{.path = "/v1/chat/completions"};
  for (const auto at : {0ms, 100ms, 999ms}) stats.call_started(call, t0 + at);  // 3 in (t0-1s, t0+999]
  CHECK(stats.to_json()["max_in_1s"] == 3);
  stats.call_started(call, t0 + 1000ms);  // the window (0, 1000]: t0 has left it
  CHECK(stats.to_json()["max_in_1s"] == 3);
  stats.call_started(call, t0 + 1050ms);  // (50, 1050]: 100, 999, 1000, 1050
  CHECK(stats.to_json()["max_in_1s"] == 4);
  stats.call_started(call, t0 + 59'999ms);
  stats.call_started(call, t0 + 60'000ms);  // (0, 60000]: all but t0
  CHECK(stats.to_json()["max_in_60s"] == 6);
  CHECK(stats.to_json()["max_in_1s"] == 4);
  CHECK(stats.to_json()["requests"] == 7);
}

TEST_CASE("a start recorded after a later one (threads read the clock before the lock) still "
          "leaves the window") {
  laneq::mock::MockStats stats(100);
  const std::chrono::steady_clock::time_point t0{std::chrono::hours(1)};
  const laneq::mock::CallInfo call{.path = "/v1/chat/completions"};
  stats.call_started(call, t0 + 1006ms);
  stats.call_started(call, t0 + 1005ms);  // came in second
  CHECK(stats.to_json()["max_in_1s"] == 2);
  stats.call_started(call, t0 + 2005ms);  // (1005, 2005]: 1006 and 2005, not the late 1005
  CHECK(stats.to_json()["max_in_1s"] == 2);
  stats.call_started(call, t0 + 2004ms);  // late again, inside: (1005, 2005] holds 3 now
  CHECK(stats.to_json()["max_in_1s"] == 3);
  stats.call_started(call, t0 + 5ms);     // long gone: counted in requests, not in a window
  CHECK(stats.to_json()["max_in_1s"] == 3);
  CHECK(stats.to_json()["requests"] == 5);
}

// --- in-process use and the program ---------------------------------------------------------

TEST_CASE("MockServer runs on the caller's io_context (2 threads) and stop() lets run() return") {
  asio::io_context io;
  MockServer server(io, {});
  server.start();
  std::promise<void> done_a, done_b;
  std::thread a([&] { io.run(); done_a.set_value(); });
  std::thread b([&] { io.run(); done_b.set_value(); });
  {
    HttpClient c(server.port());
    for (int i = 0; i < 3; ++i) CHECK(c.post(chat_path, openai_body(), openai_auth()).status == 200);
    HttpClient idle(server.port());  // an open idle connection must not keep the server alive
    CHECK(server.wait_stats([](const json& s) { return s["connections"]["current"] == 2; }));
    server.stop();
    const bool stopped = done_a.get_future().wait_for(10s) == std::future_status::ready &&
                         done_b.get_future().wait_for(10s) == std::future_status::ready;
    if (!stopped) io.stop();  // fail, don't hang
    CHECK(stopped);
  }
  a.join();
  b.join();
  CHECK(server.stats()["requests"] == 3);
}

TEST_CASE("laneq-mock-api prints its port, answers, and exits cleanly on SIGTERM") {
  laneq::test::ChildProcess child(LANEQ_MOCK_API_EXE, {"--rpm", "100", "--latency-ms", "1", "--seed=3"});
  const auto line = child.read_stdout(true, 10s);
  std::smatch m;
  REQUIRE(std::regex_match(line, m, std::regex(R"(laneq-mock-api listening on 127\.0\.0\.1:(\d+)\n)")));
  const auto port = static_cast<unsigned short>(std::stoi(m[1]));
  CHECK(port != 0);

  HttpClient c(port);
  const auto r = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(r.status == 200);
  CHECK(r.header("x-ratelimit-limit-requests") == "100");
  CHECK(c.request("GET", "/stats").json()["requests"] == 1);

  child.signal(SIGTERM);
  CHECK(child.exit_code(10s) == 0);
  CHECK(child.read_stdout(false, 1s).empty());  // exactly one line
}

// --- stream pacing, 429 headers, bounds --------------------------------------------------

TEST_CASE("the stream chunk delay is between events: the last goes out with the body's end, and "
          "a client that closes once it has it did not cut the call short",
          "[mock][stream]") {
  MockServerThread server({.stream_chunk_delay = 300ms, .completion_tokens = 2});
  HttpClient c(server.port());
  auto body = openai_body();
  body["stream"] = true;
  c.send("POST", chat_path, with(openai_auth(), {{"content-type", "application/json"}}),
         body.dump());
  REQUIRE(c.read_until_contains("data: [DONE]"));
  c.close();  // at once: the answer is complete
  REQUIRE(server.wait_stats([](const json& s) { return s["in_flight"] == 0; }));
  const auto stats = server.stats();
  // (the server used to wait one more delay after [DONE]: the close came during it)
  CHECK(stats["connections"]["closed_in_flight"] == 0);
  CHECK(stats["usage"]["completion_tokens"] == 2);
}

TEST_CASE("a cut stream's events are paced by the chunk delay too", "[mock][stream]") {
  MockServerThread server({.stream_chunk_delay = 300ms, .completion_tokens = 4});
  server.script(laneq::mock::outcomes_from_json(json::parse(R"([{"kind":"stream_cut"}])")));
  HttpClient c(server.port());
  auto body = anthropic_body();
  body["stream"] = true;
  // (from before the request: the server cannot start pacing before it has it)
  const auto t0 = std::chrono::steady_clock::now();
  c.send("POST", messages_path, with(anthropic_auth(), {{"content-type", "application/json"}}),
         body.dump());
  const auto head = c.read_head();
  REQUIRE(head.status == 200);
  c.read_until_closed();
  // message_start, content_block_start and 4 deltas at least before the cut: 5 delays between
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 5 * 300ms);
}

TEST_CASE("no-headers-on-429 leaves rate-limit and retry-after headers off every 429, not only "
          "a bucket's",
          "[mock][rate_limit]") {
  MockServerThread server({.rpm = 100, .rate_limit_headers_on_429 = false,
                           .insufficient_quota_rate = 1.0});
  HttpClient c(server.port());
  auto r = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(r.status == 429);
  CHECK(r.json()["error"]["code"] == "insufficient_quota");
  CHECK_FALSE(r.header("x-ratelimit-limit-requests"));
  server.script(laneq::mock::outcomes_from_json(
      json::parse(R"([{"kind":"insufficient_quota","retry_after":5},{"status":503,"retry_after":5}])")));
  r = c.post(chat_path, openai_body(), openai_auth());
  REQUIRE(r.status == 429);
  CHECK_FALSE(r.header("retry-after"));
  CHECK_FALSE(r.header("x-ratelimit-limit-requests"));
  r = c.post(chat_path, openai_body(), openai_auth());  // not a 429: its retry-after stays
  REQUIRE(r.status == 503);
  CHECK(r.header("retry-after") == "5");
}

TEST_CASE("a request no bucket could ever hold is refused naming that bucket, even while "
          "another is only empty for now",
          "[mock][rate_limit]") {
  MockServerThread server({.rpm = 1, .tpm = 100});
  HttpClient c(server.port());
  REQUIRE(c.post(chat_path, openai_body(), openai_auth()).status == 200);  // requests now empty
  auto big = openai_body();
  big["max_tokens"] = 500;
  const auto r = c.post(chat_path, big, openai_auth());
  REQUIRE(r.status == 429);
  const std::string message = r.json()["error"]["message"];
  INFO(message);
  CHECK(message.find("Limit 100") != std::string::npos);  // the tokens bucket, not "Limit 1"
  CHECK(message.find("(TPM)") != std::string::npos);
}

TEST_CASE("an answer to HEAD has no body, so the next answer on the connection reads right",
          "[mock][http]") {
  MockServerThread server;
  HttpClient c(server.port());
  c.send("HEAD", "/stats");
  const auto head = c.read_head();  // 405: /stats is GET only
  CHECK(head.status == 405);
  CHECK(head.header("content-length"));  // the size a GET would get...
  CHECK(c.request("GET", "/stats").status == 200);  // ...but no bytes of it
}

TEST_CASE("a request with both Transfer-Encoding and Content-Length is answered, then the "
          "connection closes",
          "[mock][http]") {
  MockServerThread server;
  HttpClient c(server.port());
  const std::string body = openai_body().dump();
  std::ostringstream chunked;
  chunked << std::hex << body.size() << "\r\n" << body << "\r\n0\r\n\r\n";
  c.send("POST", chat_path,
         with(openai_auth(), {{"content-type", "application/json"},
                              {"transfer-encoding", "chunked"},
                              {"content-length", "3"}}),
         chunked.str());
  const auto r = c.read_response();
  CHECK(r.status == 200);
  CHECK(r.header("connection") == "close");
  CHECK(c.read_until_closed() == asio::error::eof);
}

TEST_CASE("a client that keeps sending while its answer is delayed does not grow the server's "
          "memory: beyond one request's worth, the server stops reading",
          "[mock][http]") {
  MockServerThread server({.latency = 3s, .max_body_bytes = 1024});
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address_v4("127.0.0.1"), server.port()});
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                              "authorization: Bearer k\r\ncontent-type: application/json\r\n"
                              "content-length: " + std::to_string(openai_body().dump().size()) +
                              "\r\n\r\n" + openai_body().dump();
  asio::write(s, asio::buffer(request));
  s.non_blocking(true);
  const std::string junk(64 * 1024, 'x');
  std::size_t sent = 0;
  const std::size_t cap = 64u << 20;
  while (sent < cap) {
    std::error_code ec;
    const auto n = s.write_some(asio::buffer(junk), ec);
    sent += n;
    if (ec == asio::error::would_block) {
      pollfd p{s.native_handle(), POLLOUT, 0};
      if (::poll(&p, 1, 500) == 0) break;  // no room for half a second: nobody reads
    } else if (ec) {
      FAIL("write: " << ec.message());
    }
  }
  INFO("sent " << sent << " bytes");
  CHECK(sent < 32u << 20);  // kernel buffers and one request's worth; it used to take all 64 MiB
}

TEST_CASE("laneq-mock-api rejects bad flags with a message and exit code 2") {
  const auto run = [](std::vector<std::string> args) {
    laneq::test::ChildProcess child(LANEQ_MOCK_API_EXE, std::move(args));
    const auto err = child.read_stderr(false, 10s);  // to EOF: the program ends
    return std::make_pair(child.exit_code(10s), err);
  };
  auto [code, err] = run({"--bogus"});
  CHECK(code == 2);
  CHECK(err.find("--bogus") != std::string::npos);
  std::tie(code, err) = run({"--rpm", "lots"});
  CHECK(code == 2);
  CHECK(err.find("--rpm") != std::string::npos);
  std::tie(code, err) = run({"--rpm-slice-ms", "1000"});  // it would slice nothing
  CHECK(code == 2);
  CHECK(err.find("needs rpm") != std::string::npos);
  std::tie(code, err) = run({"--error-rate-500", "1.5"});
  CHECK(code == 2);
  std::tie(code, err) = run({"--port"});
  CHECK(code == 2);
  std::tie(code, err) = run({"--help"});
  CHECK(code == 0);
}
