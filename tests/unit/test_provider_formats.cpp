// OpenAI and Anthropic wire formats: request bodies, response and error parsing (every row of the
// error mapping), and the streaming accumulators fed through the SSE parser.
#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "laneq/detail/json_depth.hpp"
#include "laneq/error.hpp"
#include "laneq/providers/anthropic_format.hpp"
#include "laneq/providers/openai_format.hpp"
#include "laneq/sse.hpp"

using laneq::errc;
using laneq::Headers;
using laneq::Request;
using laneq::Response;
using laneq::SseEvent;
using laneq::SseParser;
using json = nlohmann::json;

namespace {

std::error_code err(errc e) { return laneq::make_error_code(e); }

Request chat(bool stream = false) {
  Request r;
  r.model = "m-1";
  r.messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye?"}};
  r.stream = stream;
  return r;
}

json openai_body(const Request& r) { return json::parse(laneq::openai::request_body(r)); }
json anthropic_body(const Request& r, std::int32_t fallback = laneq::anthropic::default_max_tokens) {
  return json::parse(laneq::anthropic::request_body(r, fallback));
}

// Feeds `stream` through an SseParser in chunks of `chunk` bytes into `acc`.
template <class Acc>
void run_stream(Acc& acc, std::string_view stream, std::size_t chunk = 7) {
  SseParser parser;
  for (std::size_t i = 0; i < stream.size(); i += chunk)
    parser.feed(stream.substr(i, chunk), [&](const SseEvent& e) { acc.on_event(e); });
  REQUIRE_FALSE(parser.failed());
}

std::string sse_data(std::string_view data) { return "data: " + std::string(data) + "\n\n"; }
std::string sse_event(std::string_view name, std::string_view data) {
  return "event: " + std::string(name) + "\n" + sse_data(data);
}

// ---- OpenAI fixtures, shaped like the real API's ----

const std::string openai_success = R"({
  "id": "chatcmpl-9abc", "object": "chat.completion", "created": 1714566896,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [{"index": 0,
               "message": {"role": "assistant", "content": "Hello there!", "refusal": null},
               "logprobs": null, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 0}},
  "system_fingerprint": "fp_44709d6fcb"})";

std::string openai_error(std::string_view message, std::string_view type, std::string_view code) {
  json e = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}}}};
  e["error"]["code"] = code.empty() ? json(nullptr) : json(code);
  return e.dump();
}

std::string openai_chunk(std::string_view choices, std::string_view usage = "null") {
  return sse_data(R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1714566896,)"
                  R"("model":"gpt-4o-mini","choices":)" + std::string(choices) +
                  R"(,"usage":)" + std::string(usage) + "}");
}

std::string openai_delta(std::string_view content) {
  return openai_chunk(R"([{"index":0,"delta":{"content":)" + json(content).dump() +
                      R"(},"logprobs":null,"finish_reason":null}])");
}

const std::string openai_stream_head =
    openai_chunk(R"([{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}])") +
    openai_delta("Hel") + openai_delta("lo, ") + openai_delta("world");
const std::string openai_stream_finish =
    openai_chunk(R"([{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}])");
const std::string openai_stream_usage =
    openai_chunk("[]", R"({"prompt_tokens":9,"completion_tokens":4,"total_tokens":13})");
const std::string openai_stream_done = "data: [DONE]\n\n";

// The tool calls an OpenAI stream adds up to (the stream must end well).
json streamed_tool_calls(std::string_view stream) {
  laneq::openai::StreamAccumulator acc;
  run_stream(acc, stream);
  Response out;
  CHECK_FALSE(acc.finish(out));
  return out.raw["choices"][0]["message"]["tool_calls"];
}

// ---- Anthropic fixtures ----

const std::string anthropic_success = R"({
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
  "model": "claude-3-5-sonnet-20241022",
  "content": [{"type": "text", "text": "Hello"},
              {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
              {"type": "text", "text": ", world"}],
  "stop_reason": "tool_use", "stop_sequence": null,
  "usage": {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 300,
            "output_tokens": 42}})";

std::string anthropic_error(std::string_view type, std::string_view message) {
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}}.dump();
}

const std::string anthropic_stream_head =
    sse_event("message_start",
              R"({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",)"
              R"("content":[],"model":"claude-3-5-sonnet-20241022","stop_reason":null,"stop_sequence":null,)"
              R"("usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}})") +
    sse_event("content_block_start",
              R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})") +
    sse_event("ping", R"({"type": "ping"})") +
    sse_event("content_block_delta",
              R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}})") +
    sse_event("content_block_delta",
              R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", world"}})");
const std::string anthropic_stream_tail =
    sse_event("content_block_stop", R"({"type":"content_block_stop","index":0})") +
    sse_event("message_delta",
              R"({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}})") +
    sse_event("message_stop", R"({"type":"message_stop"})");

}  // namespace

// ============================== request bodies ==============================

TEST_CASE("an OpenAI body without stream carries no stream_options, even from extra") {
  Request r = chat();
  r.extra = {{"stream_options", {{"include_obfuscation", false}}}, {"user", "u1"}};
  json b = openai_body(r);
  CHECK_FALSE(b.contains("stream_options"));  // OpenAI: 400 without stream
  CHECK(b["user"] == "u1");
  r.stream = true;
  b = openai_body(r);
  CHECK(b["stream_options"]["include_obfuscation"] == false);
  CHECK(b["stream_options"]["include_usage"] == true);
}

TEST_CASE("the OpenAI body has model and every message in order, system included") {
  const json b = openai_body(chat());
  CHECK(b["model"] == "m-1");
  REQUIRE(b["messages"].size() == 4);
  CHECK(b["messages"][0] == json{{"role", "system"}, {"content", "Be brief."}});
  CHECK(b["messages"][3] == json{{"role", "user"}, {"content", "Bye?"}});
  CHECK_FALSE(b.contains("max_tokens"));
  CHECK_FALSE(b.contains("stream"));
  CHECK_FALSE(b.contains("stream_options"));
}

TEST_CASE("the OpenAI body sends max_tokens only when positive") {
  Request r = chat();
  r.max_tokens = 256;
  CHECK(openai_body(r)["max_tokens"] == 256);
  r.max_tokens = -5;
  CHECK_FALSE(openai_body(r).contains("max_tokens"));
}

TEST_CASE("a streamed OpenAI body asks for the usage chunk") {
  const json b = openai_body(chat(true));
  CHECK(b["stream"] == true);
  CHECK(b["stream_options"] == json{{"include_usage", true}});
}

TEST_CASE("OpenAI extra fields are merged in and win, except stream which follows Request::stream") {
  Request r = chat(true);
  r.max_tokens = 100;
  r.extra = {{"temperature", 0.2}, {"max_tokens", 7}, {"model", "m-2"},
             {"stream_options", {{"include_usage", false}}}, {"stream", false}};
  const json b = openai_body(r);
  CHECK(b["temperature"] == 0.2);
  CHECK(b["max_tokens"] == 7);
  CHECK(b["model"] == "m-2");
  CHECK(b["stream_options"]["include_usage"] == false);
  CHECK(b["stream"] == true);

  Request plain = chat();
  plain.extra = {{"stream", true}, {"max_completion_tokens", 50}};
  const json p = openai_body(plain);
  CHECK_FALSE(p.contains("stream"));
  CHECK(p["max_completion_tokens"] == 50);
}

TEST_CASE("the OpenAI body spells max_tokens as its server wants, and can leave stream_options "
          "out - extra's stream_options adds to include_usage") {
  Request r = chat(true);
  r.max_tokens = 64;
  const laneq::openai::BodyOptions current{.max_tokens_field = "max_completion_tokens"};
  json b = json::parse(laneq::openai::request_body(r, current));
  CHECK(b["max_completion_tokens"] == 64);
  CHECK_FALSE(b.contains("max_tokens"));
  CHECK(b["stream_options"] == json{{"include_usage", true}});
  b = json::parse(laneq::openai::request_body(r, {.stream_usage = false}));
  CHECK(b["max_tokens"] == 64);
  CHECK(b["stream"] == true);
  CHECK_FALSE(b.contains("stream_options"));
  r.extra = {{"stream_options", {{"include_obfuscation", false}}}, {"temperature", 0}};
  b = json::parse(laneq::openai::request_body(r, current));
  CHECK(b["stream_options"] == json{{"include_usage", true}, {"include_obfuscation", false}});
  CHECK(b["max_completion_tokens"] == 64);
}

TEST_CASE("a non-object extra is a programming error for both providers - null adds nothing") {
  for (const json& bad : {json::array({1}), json("x"), json(3), json(true)}) {
    Request r = chat();
    r.extra = bad;
    CHECK_THROWS_AS(laneq::openai::request_body(r), std::invalid_argument);
    CHECK_THROWS_AS(laneq::anthropic::request_body(r), std::invalid_argument);
  }
  CHECK(openai_body(chat()).size() == 2);  // model, messages
  CHECK(anthropic_body(chat()).size() == 4);  // model, max_tokens, system, messages
}

TEST_CASE("invalid UTF-8 in a message is replaced, not thrown") {
  Request r = chat();
  r.messages = {{"user", "bad \xFF byte"}};
  const json o = openai_body(r);
  CHECK(o["messages"][0]["content"] == "bad \xEF\xBF\xBD byte");
  const json a = anthropic_body(r);
  CHECK(a["messages"][0]["content"] == "bad \xEF\xBF\xBD byte");
}

TEST_CASE("the Anthropic body moves system messages to the top-level system, joined") {
  Request r = chat();
  r.messages.push_back({"system", "Answer in French."});
  const json b = anthropic_body(r);
  CHECK(b["system"] == "Be brief.\n\nAnswer in French.");
  REQUIRE(b["messages"].size() == 3);
  CHECK(b["messages"][0] == json{{"role", "user"}, {"content", "Hi"}});
  CHECK(b["messages"][1] == json{{"role", "assistant"}, {"content", "Hello"}});
  CHECK(b["messages"][2] == json{{"role", "user"}, {"content", "Bye?"}});

  Request no_system;
  no_system.model = "m";
  no_system.messages = {{"user", "Hi"}};
  CHECK_FALSE(anthropic_body(no_system).contains("system"));

  Request developer = no_system;  // OpenAI's "developer" is no Messages role either
  developer.messages.insert(developer.messages.begin(), {"developer", "Be terse."});
  const json d = anthropic_body(developer);
  CHECK(d["system"] == "Be terse.");
  CHECK(d["messages"] == json::array({json{{"role", "user"}, {"content", "Hi"}}}));
  developer.extra = {{"temperature", 0}};  // the merging path too
  CHECK(anthropic_body(developer)["system"] == "Be terse.");
  CHECK(anthropic_body(developer)["messages"].size() == 1);

  Request empty_system = no_system;  // an empty system prompt is still sent as given
  empty_system.messages.insert(empty_system.messages.begin(), {"system", ""});
  CHECK(anthropic_body(empty_system)["system"] == "");
}

TEST_CASE("the Anthropic body always has max_tokens: the request's, else the fallback") {
  Request r = chat();
  CHECK(anthropic_body(r)["max_tokens"] == 4096);
  CHECK(laneq::anthropic::default_max_tokens == 4096);
  CHECK(anthropic_body(r, 1000)["max_tokens"] == 1000);
  r.max_tokens = 300;
  CHECK(anthropic_body(r, 1000)["max_tokens"] == 300);
  CHECK_THROWS_AS(laneq::anthropic::request_body(r, 0), std::invalid_argument);
}

TEST_CASE("the Anthropic body streams only when asked, and extra wins except for stream") {
  CHECK_FALSE(anthropic_body(chat()).contains("stream"));
  CHECK(anthropic_body(chat(true))["stream"] == true);
  CHECK_FALSE(anthropic_body(chat(true)).contains("stream_options"));

  Request r = chat(true);
  r.extra = {{"system", json::array({{{"type", "text"}, {"text", "cached"},
                                      {"cache_control", {{"type", "ephemeral"}}}}})},
             {"max_tokens", 5}, {"stream", false}, {"temperature", 0}};
  const json b = anthropic_body(r);
  CHECK(b["system"][0]["text"] == "cached");
  CHECK(b["max_tokens"] == 5);
  CHECK(b["stream"] == true);
  CHECK(b["temperature"] == 0);
}

// ============================== OpenAI responses ==============================

TEST_CASE("an OpenAI completion fills text, usage, finish reason, status, headers and raw") {
  const Headers h{{"x-request-id", "req_1"}, {"x-ratelimit-remaining-requests", "99"}};
  Response out;
  out.attempts = 3;  // the queue's field: left alone
  const std::error_code ec = laneq::openai::parse_response(200, h, openai_success, out);
  CHECK_FALSE(ec);
  CHECK(out.status == 200);
  CHECK(out.text == "Hello there!");
  CHECK(out.usage.input_tokens == 12);
  CHECK(out.usage.output_tokens == 3);
  CHECK(out.finish_reason == "stop");
  CHECK(out.finish() == laneq::Finish::stop);
  CHECK(out.headers == h);
  CHECK(out.raw["id"] == "chatcmpl-9abc");
  CHECK(out.error_type.empty());
  CHECK(out.attempts == 3);
}

TEST_CASE("an OpenAI completion with null content (tool calls) succeeds with empty text") {
  const std::string body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":null,
    "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},
    "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7}})";
  Response out;
  out.text = "stale";
  CHECK_FALSE(laneq::openai::parse_response(200, {}, body, out));
  CHECK(out.text.empty());
  CHECK(out.finish_reason == "tool_calls");
  CHECK(out.finish() == laneq::Finish::tool_call);
  CHECK(out.usage.total() == 12);
}

TEST_CASE("an OpenAI completion whose content is an array of parts succeeds with its text parts") {
  // Mistral's reasoning models (and gateways in front of others) answer so: a billed success,
  // not malformed_response (which is not retried: the answer was lost).
  const std::string body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":[
    {"type":"thinking","thinking":[{"type":"text","text":"hmm"}]},{"type":"text","text":"4"},
    {"type":"text","text":"2"}]},"finish_reason":"stop"}]})";
  Response out;
  CHECK_FALSE(laneq::openai::parse_response(200, {}, body, out));
  CHECK(out.text == "42");
  CHECK(out.raw["choices"][0]["message"]["content"][0]["type"] == "thinking");  // kept in raw
  std::vector<std::string> deltas;
  laneq::openai::StreamAccumulator acc([&](std::string_view d) { deltas.emplace_back(d); });
  run_stream(acc, sse_data(R"({"id":"c1","choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[]},{"type":"refusal","refusal":"no"}]}}]})") +
                      sse_data(R"({"id":"c1","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"4"}]}}]})") +
                      sse_data(R"({"id":"c1","choices":[{"index":0,"delta":{"content":"2"},"finish_reason":"stop"}]})") +
                      "data: [DONE]\n\n");
  Response streamed;
  CHECK_FALSE(acc.finish(streamed));
  CHECK(streamed.text == "42");
  CHECK(deltas == std::vector<std::string>{"4", "2"});
  CHECK(streamed.raw["choices"][0]["message"]["refusal"] == "no");
}

TEST_CASE("an OpenAI 2xx that is not a completion is malformed_response") {
  for (const char* body : {"", "not json", "[1,2]", "{}", R"({"choices": []})",
                           R"({"choices": {}})", R"({"choices": [1]})", R"({"choices": [{}]})",
                           R"({"choices": [{"message": {"content": 5}}]})",
                           R"({"choices": [{"message": "hi"}]})", "{\"choices\": [{\"message\": {\"content\": \"x\"}}]"}) {
    INFO(body);
    Response out;
    CHECK(laneq::openai::parse_response(200, {}, body, out) == err(errc::malformed_response));
    CHECK(out.status == 200);
  }
  Response out;
  CHECK(laneq::openai::parse_response(200, {}, "<html>", out) == err(errc::malformed_response));
  CHECK(out.raw.is_null());
}

TEST_CASE("an OpenAI error body in a 2xx is mapped by its words, not called malformed") {
  Response out;
  CHECK(laneq::openai::parse_response(200, {}, openai_error("The server had an error", "server_error", ""), out) ==
        err(errc::server_error));
  CHECK(out.error_type == "server_error");
  CHECK(out.error_message == "The server had an error");
}

TEST_CASE("OpenAI error statuses map to laneq codes with the provider's type and message") {
  struct Row {
    int status;
    std::string body;
    errc want;
    std::string type;
  };
  const std::vector<Row> rows{
      {400, openai_error("This model's maximum context length is 8192 tokens.", "invalid_request_error", "context_length_exceeded"),
       errc::bad_request, "context_length_exceeded"},
      {400, openai_error("'messages' is a required property", "invalid_request_error", ""), errc::bad_request, "invalid_request_error"},
      {404, openai_error("The model `gpt-9` does not exist", "invalid_request_error", "model_not_found"), errc::bad_request, "model_not_found"},
      {422, openai_error("Unprocessable", "invalid_request_error", ""), errc::bad_request, "invalid_request_error"},
      {401, openai_error("Incorrect API key provided: sk-***.", "invalid_request_error", "invalid_api_key"), errc::auth, "invalid_api_key"},
      {403, openai_error("Country, region, or territory not supported", "request_forbidden", "unsupported_country_region_territory"), errc::auth,
       "unsupported_country_region_territory"},
      {413, openai_error("Request entity too large", "invalid_request_error", ""), errc::request_too_large, "invalid_request_error"},
      {429, openai_error("Rate limit reached for gpt-4o in organization org-1 on requests per min (RPM): Limit 500, Used 500, Requested 1.",
                         "requests", "rate_limit_exceeded"), errc::rate_limited, "rate_limit_exceeded"},
      {429, openai_error("You exceeded your current quota, please check your plan and billing details.", "insufficient_quota",
                         "insufficient_quota"), errc::quota_exceeded, "insufficient_quota"},
      {429, openai_error("You exceeded your current quota.", "insufficient_quota", ""), errc::quota_exceeded, "insufficient_quota"},
      {429, openai_error("Your account is not active, please check your billing details on our website.", "billing_not_active",
                         "billing_not_active"), errc::quota_exceeded, "billing_not_active"},
      {429, openai_error("Request too large for gpt-4o in organization org-1 on tokens per min (TPM): Limit 30000, Requested 50000.",
                         "tokens", "rate_limit_exceeded"), errc::request_too_large, "rate_limit_exceeded"},
      {503, openai_error("The engine is currently overloaded, please try again later", "server_error", ""), errc::overloaded, "server_error"},
      {529, "", errc::overloaded, ""},
      {500, openai_error("The server had an error while processing your request.", "server_error", ""), errc::server_error, "server_error"},
      {502, "<html><body>Bad gateway</body></html>", errc::server_error, ""},
      {504, "", errc::server_error, ""},
      {408, "", errc::server_error, ""},
      {409, "", errc::server_error, ""},
      {418, "", errc::bad_request, ""},
      {302, "", errc::malformed_response, ""},
      {0, "", errc::malformed_response, ""},
      {0, openai_error("boom", "server_error", ""), errc::malformed_response, "server_error"},
      {101, openai_error("You exceeded your current quota.", "insufficient_quota", ""), errc::malformed_response,
       "insufficient_quota"},
  };
  for (const Row& row : rows) {
    INFO(row.status << " " << row.body);
    Response out;
    out.text = "stale";
    CHECK(laneq::openai::parse_response(row.status, {}, row.body, out) == err(row.want));
    CHECK(out.status == row.status);
    CHECK(out.error_type == row.type);
    CHECK(out.text.empty());
    if (json::accept(row.body)) CHECK(out.error_message == json::parse(row.body)["error"]["message"]);
  }
}

TEST_CASE("a non-JSON error body is kept, truncated, as the error message") {
  Response out;
  CHECK(laneq::openai::parse_response(502, {}, "<html>Bad gateway</html>", out) == err(errc::server_error));
  CHECK(out.error_message == "<html>Bad gateway</html>");
  CHECK(out.raw.is_null());
  const std::string huge(5000, 'x');
  CHECK(laneq::anthropic::parse_response(500, {}, huge, out) == err(errc::server_error));
  CHECK(out.error_message == huge.substr(0, 512));
}

TEST_CASE("OpenAI error codes without a status (an error chunk in a stream) follow the body") {
  using laneq::openai::error_code_for;
  CHECK(error_code_for(0, "insufficient_quota", "", "") == err(errc::quota_exceeded));
  CHECK(error_code_for(0, "tokens", "rate_limit_exceeded", "Request too large for gpt-4o") == err(errc::request_too_large));
  CHECK(error_code_for(0, "requests", "rate_limit_exceeded", "Rate limit reached") == err(errc::rate_limited));
  CHECK(error_code_for(0, "invalid_request_error", "context_length_exceeded", "") == err(errc::bad_request));
  CHECK(error_code_for(0, "invalid_request_error", "invalid_api_key", "") == err(errc::auth));
  CHECK(error_code_for(0, "", "invalid_api_key", "") == err(errc::auth));
  CHECK(error_code_for(0, "server_error", "", "") == err(errc::server_error));
  CHECK(error_code_for(0, "", "", "") == err(errc::server_error));
  // A quota error is billing whatever status carries it.
  CHECK(error_code_for(400, "insufficient_quota", "", "") == err(errc::quota_exceeded));
  // "Request too large" only turns a 429 into request_too_large; a 400 stays bad_request.
  CHECK(error_code_for(400, "", "", "Request too large") == err(errc::bad_request));
  // A numeric code in a 200's body or stream (vLLM, OpenRouter) is the status it stands for.
  CHECK(error_code_for(0, "BadRequestError", "400", "x") == err(errc::bad_request));
  CHECK(error_code_for(200, "", "429", "Rate limit exceeded") == err(errc::rate_limited));
  CHECK(error_code_for(200, "", "402", "Insufficient credits") == err(errc::quota_exceeded));
  CHECK(error_code_for(0, "", "503", "") == err(errc::overloaded));
  CHECK(error_code_for(0, "", "4000", "") == err(errc::server_error));  // no status
  CHECK(error_code_for(402, "", "", "") == err(errc::quota_exceeded));  // Payment Required
  CHECK(laneq::anthropic::error_code_for(402, "", "") == err(errc::quota_exceeded));
}

TEST_CASE("an OpenAI stream's error chunk with a numeric code fails as that status") {
  laneq::openai::StreamAccumulator acc;
  run_stream(acc, sse_data(R"({"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]})") +
                      sse_data(R"({"error":{"object":"error","message":"Too many requests",)"
                               R"("type":"RateLimitError","code":429}})"));
  Response out;
  CHECK(acc.finish(out) == err(errc::rate_limited));
  CHECK(out.error_message == "Too many requests");
}

TEST_CASE("parse_response overwrites everything a reused Response carried from a success") {
  Response out;
  REQUIRE_FALSE(laneq::openai::parse_response(200, {{"a", "b"}}, openai_success, out));
  CHECK(laneq::openai::parse_response(429, {}, openai_error("slow down", "requests", "rate_limit_exceeded"), out) ==
        err(errc::rate_limited));
  CHECK(out.text.empty());
  CHECK(out.usage.total() == 0);
  CHECK(out.finish_reason.empty());
  CHECK(out.headers.empty());
  CHECK(out.raw.contains("error"));
  REQUIRE_FALSE(laneq::openai::parse_response(200, {}, openai_success, out));
  CHECK(out.error_type.empty());
  CHECK(out.error_message.empty());
}

// ============================== Anthropic responses ==============================

TEST_CASE("finish(): each provider's stop reasons in one vocabulary") {
  using laneq::Finish;
  const std::pair<const char*, Finish> words[] = {
      // OpenAI chat completions
      {"stop", Finish::stop}, {"length", Finish::length}, {"tool_calls", Finish::tool_call},
      {"function_call", Finish::tool_call}, {"content_filter", Finish::content_filter},
      // Anthropic messages
      {"end_turn", Finish::stop}, {"stop_sequence", Finish::stop}, {"max_tokens", Finish::length},
      {"model_context_window_exceeded", Finish::length}, {"tool_use", Finish::tool_call},
      {"refusal", Finish::content_filter}, {"pause_turn", Finish::paused},
      // none, or one laneq does not know (exact words only)
      {"", Finish::unknown}, {"STOP", Finish::unknown}, {"stop ", Finish::unknown},
      {"something_new", Finish::unknown}};
  for (const auto& [word, want] : words) {
    INFO(word);
    Response r;
    r.finish_reason = word;
    CHECK(r.finish() == want);
  }
  static_assert(laneq::finish_of("end_turn") == Finish::stop);
  CHECK(laneq::finish_name(Finish::unknown) == "unknown");
  CHECK(laneq::finish_name(Finish::stop) == "stop");
  CHECK(laneq::finish_name(Finish::length) == "length");
  CHECK(laneq::finish_name(Finish::tool_call) == "tool_call");
  CHECK(laneq::finish_name(Finish::content_filter) == "content_filter");
  CHECK(laneq::finish_name(Finish::paused) == "paused");
  CHECK(laneq::finish_name(static_cast<Finish>(200)) == "unknown");
}

TEST_CASE("an Anthropic message joins its text blocks and counts cache tokens as input") {
  const Headers h{{"anthropic-ratelimit-requests-remaining", "49"}};
  Response out;
  CHECK_FALSE(laneq::anthropic::parse_response(200, h, anthropic_success, out));
  CHECK(out.status == 200);
  CHECK(out.text == "Hello, world");
  CHECK(out.usage.input_tokens == 100 + 20 + 300);
  CHECK(out.usage.rate_exempt_input_tokens == 300);  // cache reads: not rate-limited
  CHECK(out.usage.output_tokens == 42);
  CHECK(out.finish_reason == "tool_use");
  CHECK(out.finish() == laneq::Finish::tool_call);
  CHECK(out.headers == h);
  CHECK(out.raw["id"] == "msg_01XFDUDYJgAACzvnptvVoYEL");
}

TEST_CASE("an Anthropic message with only non-text blocks succeeds with empty text") {
  Response out;
  CHECK_FALSE(laneq::anthropic::parse_response(
      200, {}, R"({"type":"message","content":[{"type":"thinking","thinking":"hmm","signature":"s"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}})",
      out));
  CHECK(out.text.empty());
  CHECK(out.usage.total() == 3);
}

TEST_CASE("an Anthropic 2xx that is not a message is malformed_response") {
  for (const char* body : {"", "nope", "[]", "{}", R"({"content": "text"})", R"({"content": [1]})",
                           R"({"content": [{"type": "text"}]})", R"({"content": [{"type": "text", "text": 3}]})",
                           R"({"type":"message","content":[)"}) {
    INFO(body);
    Response out;
    CHECK(laneq::anthropic::parse_response(200, {}, body, out) == err(errc::malformed_response));
  }
}

TEST_CASE("Anthropic error statuses and types map to laneq codes with type and message") {
  struct Row {
    int status;
    std::string type;
    errc want;
  };
  const std::vector<Row> rows{
      {400, "invalid_request_error", errc::bad_request},
      {401, "authentication_error", errc::auth},
      {403, "permission_error", errc::auth},
      {404, "not_found_error", errc::bad_request},
      {413, "request_too_large", errc::request_too_large},
      {429, "rate_limit_error", errc::rate_limited},
      {500, "api_error", errc::server_error},
      {504, "timeout_error", errc::server_error},
      {529, "overloaded_error", errc::overloaded},
      {503, "api_error", errc::overloaded},
      {500, "overloaded_error", errc::overloaded},         // the type says more than a proxy's status
      {400, "request_too_large", errc::request_too_large},
      {402, "billing_error", errc::quota_exceeded},
      {408, "timeout_error", errc::server_error},
      {409, "api_error", errc::server_error},
      {451, "some_new_error", errc::bad_request},
      {200, "overloaded_error", errc::overloaded},          // an error body in a 2xx
      {200, "rate_limit_error", errc::rate_limited},
      {200, "api_error", errc::server_error},
  };
  for (const Row& row : rows) {
    INFO(row.status << " " << row.type);
    Response out;
    const std::string message = "message for " + row.type;
    CHECK(laneq::anthropic::parse_response(row.status, {{"request-id", "req_1"}},
                                           anthropic_error(row.type, message), out) == err(row.want));
    CHECK(out.status == row.status);
    CHECK(out.error_type == row.type);
    CHECK(out.error_message == message);
    CHECK(out.header("Request-Id") != nullptr);
  }
  Response out;  // no body at all: the status decides
  CHECK(laneq::anthropic::parse_response(529, {}, "", out) == err(errc::overloaded));
  CHECK(laneq::anthropic::parse_response(401, {}, "", out) == err(errc::auth));
  CHECK(laneq::anthropic::parse_response(413, {}, "<html>413</html>", out) == err(errc::request_too_large));
  CHECK(laneq::anthropic::parse_response(301, {}, "", out) == err(errc::malformed_response));
}

TEST_CASE("Anthropic error types without a status (an error event in a stream)") {
  using laneq::anthropic::error_code_for;
  CHECK(error_code_for(0, "overloaded_error") == err(errc::overloaded));
  CHECK(error_code_for(0, "rate_limit_error") == err(errc::rate_limited));
  CHECK(error_code_for(0, "request_too_large") == err(errc::request_too_large));
  CHECK(error_code_for(0, "billing_error") == err(errc::quota_exceeded));
  CHECK(error_code_for(0, "invalid_request_error") == err(errc::bad_request));
  CHECK(error_code_for(0, "not_found_error") == err(errc::bad_request));
  CHECK(error_code_for(0, "authentication_error") == err(errc::auth));
  CHECK(error_code_for(0, "permission_error") == err(errc::auth));
  CHECK(error_code_for(0, "api_error") == err(errc::server_error));
  CHECK(error_code_for(0, "") == err(errc::server_error));
}

TEST_CASE("an Anthropic 400 for an empty credit balance is quota_exceeded, not bad_request") {
  Response out;
  const std::string message = "Your credit balance is too low to access the Anthropic API. "
                              "Please go to Plans & Billing to upgrade or purchase credits.";
  CHECK(laneq::anthropic::parse_response(400, {}, anthropic_error("invalid_request_error", message),
                                         out) == err(errc::quota_exceeded));
  CHECK(out.error_message == message);
  CHECK(laneq::anthropic::parse_response(400, {}, anthropic_error("invalid_request_error",
                                                                  "max_tokens: field required"),
                                         out) == err(errc::bad_request));
}

// ============================== OpenAI streams ==============================

TEST_CASE("an OpenAI stream's tool calls and refusal come out in raw, as the completion they "
          "add up to") {
  const std::string stream =
      openai_chunk(R"([{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[)"
                   R"({"index":0,"id":"call_1","type":"function","function":{"name":"get_)"
                   R"(weather","arguments":""}}]},"finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"now",)"
                   R"("arguments":"{\"city\":"}}]},"finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":)"
                   R"("function","function":{"name":"noop","arguments":"{}"}}]},"finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":)"
                   R"("\"Paris\"}"}}]},"finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{},"finish_reason":"tool_calls"}])") +
      openai_stream_usage + openai_stream_done;
  for (std::size_t chunk : {1u, 5u, 100000u}) {
    laneq::openai::StreamAccumulator acc;
    run_stream(acc, stream, chunk);
    Response out;
    CHECK_FALSE(acc.finish(out));
    CHECK(out.text.empty());
    CHECK(out.finish_reason == "tool_calls");
    const json& message = out.raw["choices"][0]["message"];
    CHECK(message["content"].is_null());
    REQUIRE(message["tool_calls"].size() == 2);
    CHECK(message["tool_calls"][0] == json::parse(R"({"id":"call_1","type":"function",)"
                                                  R"("function":{"name":"get_weathernow",)"
                                                  R"("arguments":"{\"city\":\"Paris\"}"}})"));
    CHECK(message["tool_calls"][1]["function"]["name"] == "noop");
    CHECK(out.raw["choices"][0]["finish_reason"] == "tool_calls");
    CHECK(out.raw["usage"]["prompt_tokens"] == 9);
  }
  // A refusal: no content, the refusal's words in raw.
  laneq::openai::StreamAccumulator refused;
  run_stream(refused,
             openai_chunk(R"([{"index":0,"delta":{"role":"assistant","content":null,"refusal":""},"finish_reason":null}])") +
                 openai_chunk(R"([{"index":0,"delta":{"refusal":"I can't "},"finish_reason":null}])") +
                 openai_chunk(R"([{"index":0,"delta":{"refusal":"help with that."},"finish_reason":null}])") +
                 openai_chunk(R"([{"index":0,"delta":{},"finish_reason":"stop"}])") + openai_stream_done);
  Response out;
  CHECK_FALSE(refused.finish(out));
  CHECK(out.raw["choices"][0]["message"]["refusal"] == "I can't help with that.");
  CHECK_FALSE(out.raw["choices"][0]["message"].contains("tool_calls"));
  CHECK_FALSE(out.raw.contains("usage"));
  // A plain text stream: raw holds its text as content.
  laneq::openai::StreamAccumulator plain;
  run_stream(plain, openai_stream_head + openai_stream_finish + openai_stream_done);
  Response p;
  CHECK_FALSE(plain.finish(p));
  CHECK(p.raw["choices"][0]["message"]["content"] == "Hello, world");
  CHECK(p.raw["object"] == "chat.completion");
}

TEST_CASE("an OpenAI-compatible stream whose tool call deltas have no index joins them by id, "
          "else into the last call") {
  const std::string stream =
      openai_chunk(R"([{"index":0,"delta":{"tool_calls":[{"id":"call_a","type":"function",)"
                   R"("function":{"name":"f","arguments":"{\"x\""}}]},"finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]},)"
                   R"("finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{"tool_calls":[{"id":"call_b","type":"function",)"
                   R"("function":{"name":"g","arguments":"{}"}}]},"finish_reason":null}])") +
      openai_chunk(R"([{"index":0,"delta":{},"finish_reason":"tool_calls"}])") + openai_stream_done;
  const json calls = streamed_tool_calls(stream);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0]["id"] == "call_a");
  CHECK(calls[0]["function"]["arguments"] == "{\"x\":1}");
  CHECK(calls[1]["function"]["name"] == "g");
}

TEST_CASE("a tool call's later pieces with \"id\": \"\" (some compatible servers) keep its id") {
  for (const char* index : {R"("index":0,)", ""}) {  // with an index, and without (the last call)
    INFO("index: " << index);
    const std::string stream =
        openai_chunk(std::string(R"([{"index":0,"delta":{"tool_calls":[{)") + index +
                     R"("id":"call_a1","type":"function","function":{"name":"bash",)"
                     R"("arguments":""}}]},"finish_reason":null}])") +
        openai_chunk(std::string(R"([{"index":0,"delta":{"tool_calls":[{)") + index +
                     R"("id":"","type":"","function":{"arguments":"{\"command\":1}"}}]},)"
                     R"("finish_reason":"tool_calls"}])") +
        openai_stream_done;
    const json calls = streamed_tool_calls(stream);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]["id"] == "call_a1");
    CHECK(calls[0]["type"] == "function");
    CHECK(calls[0]["function"]["arguments"] == "{\"command\":1}");
  }
}

TEST_CASE("a streamed call's raw keeps the provider's id and model, as a non-streamed one does") {
  laneq::openai::StreamAccumulator o;
  // (Azure's first chunk: prompt filter results, with "" and 0 for what is not known yet)
  run_stream(o, sse_data(R"({"id":"","object":"","created":0,"model":"","choices":[],)"
                         R"("prompt_filter_results":[]})") +
                    openai_stream_head + openai_stream_finish + openai_stream_done);
  Response a;
  CHECK_FALSE(o.finish(a));
  CHECK(a.raw["id"] == "chatcmpl-1");
  CHECK(a.raw["model"] == "gpt-4o-mini");
  CHECK(a.raw["created"] == 1714566896);
  laneq::anthropic::StreamAccumulator c;
  run_stream(c, anthropic_stream_head +
                    sse_event("message_delta",
                              R"({"type":"message_delta","delta":{"stop_reason":"stop_sequence",)"
                              R"("stop_sequence":"END"},"usage":{"output_tokens":3}})") +
                    sse_event("message_stop", R"({"type":"message_stop"})"));
  Response b;
  CHECK_FALSE(c.finish(b));
  CHECK(b.raw["id"] == "msg_1");
  CHECK(b.raw["model"] == "claude-3-5-sonnet-20241022");
  CHECK(b.raw["stop_sequence"] == "END");
}

TEST_CASE("a full OpenAI stream yields its text, deltas, finish reason and usage chunk") {
  for (std::size_t chunk : {1u, 3u, 64u, 100000u}) {
    INFO("chunk " << chunk);
    std::vector<std::string> deltas;
    laneq::openai::StreamAccumulator acc([&](std::string_view d) { deltas.emplace_back(d); });
    run_stream(acc, openai_stream_head + openai_stream_finish + openai_stream_usage + openai_stream_done, chunk);
    CHECK(acc.done());
    Response out;
    CHECK_FALSE(acc.finish(out));
    CHECK(out.text == "Hello, world");
    CHECK(deltas == std::vector<std::string>{"Hel", "lo, ", "world"});  // the empty first delta is skipped
    CHECK(out.finish_reason == "length");
    CHECK(out.finish() == laneq::Finish::length);  // (streamed)
    CHECK(out.usage.input_tokens == 9);
    CHECK(out.usage.output_tokens == 4);
  }
}

TEST_CASE("an OpenAI stream cut before [DONE] is a network error that keeps the partial text") {
  for (const std::string& stream : {openai_stream_head, openai_stream_head + openai_stream_finish,
                                    openai_stream_head + openai_stream_finish + openai_stream_usage}) {
    laneq::openai::StreamAccumulator acc;
    run_stream(acc, stream);
    CHECK_FALSE(acc.done());
    Response out;
    CHECK(acc.finish(out) == err(errc::network));
    CHECK(out.text == "Hello, world");
    CHECK_THAT(out.error_message, Catch::Contains("stream ended before its final event"));
  }
  laneq::openai::StreamAccumulator nothing;
  Response out;
  CHECK(nothing.finish(out) == err(errc::network));
}

TEST_CASE("an OpenAI stream without a usage chunk still succeeds at [DONE], with zero usage") {
  laneq::openai::StreamAccumulator acc;
  run_stream(acc, openai_stream_head + openai_stream_finish + openai_stream_done);
  Response out;
  CHECK_FALSE(acc.finish(out));
  CHECK(out.usage.total() == 0);
}

TEST_CASE("a malformed OpenAI chunk fails the stream and stops the deltas") {
  for (const std::string bad : {"data: {\"choices\": [\n\n", "data: [1]\n\n", "data: DONE\n\n",
                                "data: {\"choices\": \"x\"}\n\n",
                                "data: {\"choices\": [{\"index\":0,\"delta\":{\"content\":7}}]}\n\n",
                                "data: {\"choices\": [{\"index\":0,\"delta\":\"x\"}]}\n\n"}) {
    INFO(bad);
    int deltas = 0;
    laneq::openai::StreamAccumulator acc([&](std::string_view) { ++deltas; });
    run_stream(acc, openai_delta("a") + bad + openai_delta("b") + openai_stream_done);
    CHECK(deltas == 1);
    CHECK_FALSE(acc.done());
    CHECK(acc.error() == err(errc::malformed_response));
    Response out;
    CHECK(acc.finish(out) == err(errc::malformed_response));
    CHECK(out.text == "a");
  }
}

TEST_CASE("an OpenAI error chunk in a 200 stream fails it with the provider's words") {
  laneq::openai::StreamAccumulator acc;
  run_stream(acc, openai_delta("partial") +
                      sse_data(openai_error("The server had an error while processing your request.", "server_error", "")) +
                      openai_stream_done);
  Response out;
  CHECK(acc.finish(out) == err(errc::server_error));
  CHECK(out.text == "partial");
  CHECK(out.error_type == "server_error");
  CHECK(out.error_message == "The server had an error while processing your request.");
}

TEST_CASE("OpenAI stream: other choices, keep-alives and events after [DONE] are ignored") {
  laneq::openai::StreamAccumulator acc;
  run_stream(acc, ": keep-alive\n\n" + openai_delta("one") +
                      openai_chunk(R"([{"index":1,"delta":{"content":"other"},"finish_reason":null}])") +
                      "data:\n\n" + openai_stream_done + openai_delta("late") + "data: junk\n\n");
  Response out;
  CHECK_FALSE(acc.finish(out));
  CHECK(out.text == "one");
}

// ============================== Anthropic streams ==============================

TEST_CASE("an Anthropic stream's content blocks come out in raw, tool_use input parsed from its "
          "pieces") {
  const std::string stream =
      anthropic_stream_head +
      sse_event("content_block_stop", R"({"type":"content_block_stop","index":0})") +
      sse_event("content_block_start",
                R"({"type":"content_block_start","index":1,"content_block":{"type":"tool_use",)"
                R"("id":"toolu_1","name":"get_weather","input":{}}})") +
      sse_event("content_block_delta",
                R"({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",)"
                R"("partial_json":"{\"city\": \"Pa"}})") +
      sse_event("content_block_delta",
                R"({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",)"
                R"("partial_json":"ris\"}"}})") +
      sse_event("content_block_stop", R"({"type":"content_block_stop","index":1})") +
      sse_event("message_delta",
                R"({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}})") +
      sse_event("message_stop", R"({"type":"message_stop"})");
  for (std::size_t chunk : {1u, 9u, 100000u}) {
    laneq::anthropic::StreamAccumulator acc;
    run_stream(acc, stream, chunk);
    Response out;
    CHECK_FALSE(acc.finish(out));
    CHECK(out.text == "Hello, world");
    CHECK(out.finish_reason == "tool_use");
    REQUIRE(out.raw["content"].size() == 2);
    CHECK(out.raw["content"][0] == json{{"type", "text"}, {"text", "Hello, world"}});
    CHECK(out.raw["content"][1] == json::parse(R"({"type":"tool_use","id":"toolu_1",)"
                                               R"("name":"get_weather","input":{"city":"Paris"}})"));
    CHECK(out.raw["stop_reason"] == "tool_use");
    CHECK(out.raw["usage"]["output_tokens"] == 30);
    CHECK(out.raw["usage"]["cache_read_input_tokens"] == 5);
  }
}

TEST_CASE("an Anthropic stream's thinking block keeps its thinking and signature in raw") {
  const std::string stream =
      anthropic_stream_head.substr(0, anthropic_stream_head.find("event: content_block_start")) +
      sse_event("content_block_start",
                R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})") +
      sse_event("content_block_delta",
                R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}})") +
      sse_event("content_block_delta",
                R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"think."}})") +
      sse_event("content_block_delta",
                R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}})") +
      sse_event("content_block_stop", R"({"type":"content_block_stop","index":0})") +
      sse_event("message_delta",
                R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}})") +
      sse_event("message_stop", R"({"type":"message_stop"})");
  laneq::anthropic::StreamAccumulator acc;
  run_stream(acc, stream);
  Response out;
  CHECK_FALSE(acc.finish(out));
  CHECK(out.text.empty());
  REQUIRE(out.raw["content"].size() == 1);
  CHECK(out.raw["content"][0] ==
        json{{"type", "thinking"}, {"thinking", "Let me think."}, {"signature", "EqQB"}});
}

TEST_CASE("a full Anthropic stream yields its text, deltas, stop reason and both usages") {
  for (std::size_t chunk : {1u, 5u, 4096u}) {
    INFO("chunk " << chunk);
    std::vector<std::string> deltas;
    laneq::anthropic::StreamAccumulator acc([&](std::string_view d) { deltas.emplace_back(d); });
    run_stream(acc, anthropic_stream_head + anthropic_stream_tail, chunk);
    CHECK(acc.done());
    Response out;
    CHECK_FALSE(acc.finish(out));
    CHECK(out.text == "Hello, world");
    CHECK(deltas == std::vector<std::string>{"Hello", ", world"});
    CHECK(out.finish_reason == "end_turn");
    CHECK(out.finish() == laneq::Finish::stop);  // (streamed)
    CHECK(out.usage.input_tokens == 25 + 10 + 5);  // from message_start, cache included
    CHECK(out.usage.rate_exempt_input_tokens == 5);
    CHECK(out.usage.output_tokens == 15);          // from message_delta, replacing the 1
  }
}

TEST_CASE("an Anthropic stream's later usage of 0 does not take back the counts reported "
          "before it") {
  // Compatible servers (sglang, gateways) send message_delta's input_tokens as 0.
  laneq::anthropic::StreamAccumulator acc;
  run_stream(acc, anthropic_stream_head + sse_event("content_block_stop",
                                                    R"({"type":"content_block_stop","index":0})") +
                      sse_event("message_delta",
                                R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},)"
                                R"("usage":{"input_tokens":0,"cache_creation_input_tokens":0,)"
                                R"("cache_read_input_tokens":0,"output_tokens":15}})") +
                      sse_event("message_stop", R"({"type":"message_stop"})"));
  Response out;
  CHECK_FALSE(acc.finish(out));
  CHECK(out.usage.input_tokens == 25 + 10 + 5);
  CHECK(out.usage.rate_exempt_input_tokens == 5);
  CHECK(out.usage.output_tokens == 15);
  CHECK(out.raw["usage"]["input_tokens"] == 25);
}

TEST_CASE("an Anthropic error event after a 200 fails the request with its type and message") {
  laneq::anthropic::StreamAccumulator acc;
  run_stream(acc, anthropic_stream_head +
                      sse_event("error", R"({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})") +
                      anthropic_stream_tail);
  CHECK_FALSE(acc.done());
  Response out;
  CHECK(acc.finish(out) == err(errc::overloaded));
  CHECK(out.error_type == "overloaded_error");
  CHECK(out.error_message == "Overloaded");
  CHECK(out.text == "Hello, world");

  laneq::anthropic::StreamAccumulator limited;
  run_stream(limited, sse_event("error", anthropic_error("rate_limit_error", "slow down")));
  CHECK(limited.finish(out) == err(errc::rate_limited));
}

TEST_CASE("an Anthropic stream cut before message_stop is a network error that keeps the partial text") {
  const std::string before_stop =
      anthropic_stream_head +
      sse_event("message_delta", R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}})");
  for (const std::string& stream : {anthropic_stream_head, before_stop}) {
    laneq::anthropic::StreamAccumulator acc;
    run_stream(acc, stream);
    Response out;
    CHECK(acc.finish(out) == err(errc::network));
    CHECK(out.text == "Hello, world");
    CHECK(out.usage.input_tokens == 40);
    CHECK_THAT(out.error_message, Catch::Contains("stream ended before its final event"));
  }
}

TEST_CASE("a malformed Anthropic event fails the stream") {
  for (const std::string& bad :
       {sse_event("content_block_delta", "{\"type\":\"content_block_delta\",\"delta\":"),
        sse_event("content_block_delta", R"({"type":"content_block_delta","delta":{"type":"text_delta","text":5}})"),
        sse_event("content_block_delta", R"({"type":"content_block_delta","delta":"x"})"),
        sse_event("message_start", R"({"type":"message_start","message":"x"})"),
        sse_event("message_start", R"({"type":"message_start","message":{"usage":[1]}})"),
        sse_event("ping", "not json"), sse_data("[]")}) {
    INFO(bad);
    laneq::anthropic::StreamAccumulator acc;
    run_stream(acc, bad + anthropic_stream_tail);
    CHECK_FALSE(acc.done());
    Response out;
    CHECK(acc.finish(out) == err(errc::malformed_response));
  }
}

TEST_CASE("Anthropic stream: non-text deltas, unknown events and a missing event name") {
  laneq::anthropic::StreamAccumulator acc;
  run_stream(acc,
             sse_event("content_block_start", R"({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}})") +
                 sse_event("content_block_delta", R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}})") +
                 sse_event("content_block_delta", R"({"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}})") +
                 sse_event("brand_new_event", R"({"type":"brand_new_event","x":1})") +
                 sse_data(R"({"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"named by data"}})") +
                 sse_data(R"({"type":"message_stop"})") +
                 sse_event("content_block_delta", R"({"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"late"}})"));
  CHECK(acc.done());
  Response out;
  CHECK_FALSE(acc.finish(out));
  CHECK(out.text == "named by data");
}

TEST_CASE("Anthropic stream: a newer message_delta with input usage updates it") {
  laneq::anthropic::StreamAccumulator acc;
  run_stream(acc, anthropic_stream_head +
                      sse_event("message_delta", R"({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"input_tokens":30,"cache_read_input_tokens":7,"output_tokens":9}})") +
                      sse_event("message_stop", R"({"type":"message_stop"})"));
  Response out;
  CHECK_FALSE(acc.finish(out));
  CHECK(out.usage.input_tokens == 30 + 10 + 7);
  CHECK(out.usage.rate_exempt_input_tokens == 7);
  CHECK(out.usage.output_tokens == 9);
  CHECK(out.finish_reason == "max_tokens");
  CHECK(out.finish() == laneq::Finish::length);  // (streamed)
}

TEST_CASE("Anthropic stream: a null usage is no usage, as in a non-streamed body, not malformed") {
  laneq::anthropic::StreamAccumulator acc;
  run_stream(acc, sse_event("message_start", R"({"type":"message_start","message":{"usage":null}})") +
                      sse_event("content_block_delta", R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}})") +
                      sse_event("message_delta", R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":null})") +
                      sse_event("message_stop", R"({"type":"message_stop"})"));
  Response out;
  CHECK_FALSE(acc.finish(out));  // was malformed_response
  CHECK(out.text == "ok");
  CHECK(out.usage.output_tokens == 0);
  CHECK(out.finish_reason == "end_turn");
}

TEST_CASE("request bodies written directly equal the ones built as a JSON tree - any text",
          "[formats][body]") {
  // Without Request::extra the bodies are written directly; with it they are built as a tree
  // and merged. A probe field forces the tree path: both must say the same.
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {
      "plain", "quote \" and \\ backslash", "line\nbreak\r\ttab", std::string("nul \0 bell \a", 11),
      "\b\f\x1f", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "bad \xff byte", "cut \xe2\x82", "", "{}[],:", "\xe0\x80 overlong",
      "\xed\xa0\x80 surrogate", "\xc0\xaf", "\xf0\x9f\x98", "\xf4\x90\x80\x80 too high"};
  for (int round = 0; round < 300; ++round) {
    Request r;
    r.model = pieces[rng() % pieces.size()];
    const auto n = 1 + rng() % 4;
    for (std::size_t i = 0; i < n; ++i)
      r.messages.push_back({rng() % 3 == 0 ? "system" : (rng() % 2 ? "user" : "assistant"),
                            pieces[rng() % pieces.size()] + pieces[rng() % pieces.size()]});
    r.max_tokens = static_cast<std::int32_t>(rng() % 3 == 0 ? 0 : rng() % 5000);
    r.stream = rng() % 2 == 0;
    Request probed = r;
    probed.extra = json{{"zz_probe", 1}};
    const laneq::openai::BodyOptions options{
        .max_tokens_field = rng() % 2 ? "max_tokens" : "max_completion_tokens",
        .stream_usage = rng() % 2 == 0};
    const std::string direct_openai = laneq::openai::request_body(r, options);
    json tree_openai = json::parse(laneq::openai::request_body(probed, options));
    tree_openai.erase("zz_probe");
    CHECK(json::parse(direct_openai) == tree_openai);
    CHECK(direct_openai == tree_openai.dump(-1, ' ', false, json::error_handler_t::replace));
    const std::string direct_anthropic = laneq::anthropic::request_body(r, 77);
    json tree_anthropic = anthropic_body(probed, 77);
    tree_anthropic.erase("zz_probe");
    CHECK(json::parse(direct_anthropic) == tree_anthropic);
  }
}

// ============================== hostile nesting ==============================

TEST_CASE("json_depth_within counts brackets outside strings only") {
  using laneq::detail::json_depth_within;
  CHECK(json_depth_within(R"({"a":[1,{"b":[]}]})", 4));
  CHECK_FALSE(json_depth_within(R"({"a":[1,{"b":[]}]})", 3));
  CHECK(json_depth_within(R"(["[[[[", "\"[[[[", {}])", 2));
  CHECK_FALSE(json_depth_within(R"([[["\\"]]])", 2));  // the string ends at the escaped backslash
  CHECK(json_depth_within(std::string(256, '[') + std::string(256, ']')));
  CHECK_FALSE(json_depth_within(std::string(257, '[') + std::string(257, ']')));
}

namespace {
// 200,000 levels: copying such a value recursed once per level and overflowed the stack.
std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }
}  // namespace

TEST_CASE("a reply nested 200000 deep is malformed_response, not a crash") {
  const std::string deep = nested(200'000);
  {
    Response out;
    CHECK(laneq::openai::parse_response(200, {}, R"({"choices":[],"usage":{"x":)" + deep + "}}",
                                        out) == err(errc::malformed_response));
    CHECK(out.raw.is_null());
  }
  {
    laneq::openai::StreamAccumulator acc;
    run_stream(acc, openai_stream_head + sse_data(R"({"choices":[],"usage":{"x":)" + deep + "}}") +
                        openai_stream_done, 4096);
    Response out;
    CHECK(acc.finish(out) == err(errc::malformed_response));
  }
  {
    laneq::anthropic::StreamAccumulator acc;
    run_stream(acc,
               anthropic_stream_head +
                   sse_event("content_block_start",
                             R"({"type":"content_block_start","index":1,"content_block":)"
                             R"({"type":"tool_use","id":"t","name":"f","input":{"x":)" +
                                 deep + "}}}") +
                   anthropic_stream_tail, 4096);
    Response out;
    CHECK(acc.finish(out) == err(errc::malformed_response));
  }
}
