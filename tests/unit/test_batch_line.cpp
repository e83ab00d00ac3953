// The CLI's batch file formats (tools/cli/batch_line): OpenAI Batch API input lines -> Request,
// results -> output lines, and what a resume reads back from an output file.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli/batch_line.hpp"
#include "laneq/error.hpp"

using laneq::cli::BadLine;
using laneq::cli::BatchLine;
using nlohmann::json;

namespace {

const std::vector<laneq::cli::LaneName> lanes = {
    {"critical", 0}, {"high", 1}, {"normal", 5}, {"low", 8}, {"background", 10}};

BatchLine good(const std::string& text) {
  auto r = laneq::cli::parse_batch_line(text, 3, lanes);
  if (auto* bad = std::get_if<BadLine>(&r)) FAIL("unexpected bad line: " << bad->message);
  return std::get<BatchLine>(r);
}

BadLine bad(const std::string& text) {
  auto r = laneq::cli::parse_batch_line(text, 7, lanes);
  REQUIRE(std::holds_alternative<BadLine>(r));
  return std::get<BadLine>(r);
}

}  // namespace

TEST_CASE("an OpenAI batch line becomes a Request with lane, client and pass-through fields",
          "[cli]") {
  const auto line = good(R"({"custom_id":"req-1","method":"POST","url":"/v1/chat/completions",
    "body":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}],
    "max_tokens":50,"temperature":0.2},"priority":"critical","client":"tenant-a"})");
  CHECK(line.line_no == 3);
  CHECK(line.custom_id == "req-1");
  CHECK(line.request.id == "req-1");
  CHECK(line.request.model == "gpt-4o-mini");
  REQUIRE(line.request.messages.size() == 2);
  CHECK(line.request.messages[1].content == "hello");
  CHECK(line.request.max_tokens == 50);
  CHECK(line.request.extra == json{{"temperature", 0.2}});
  CHECK(line.priority == 0);
  CHECK(line.client == "tenant-a");
}

TEST_CASE("priority may be a lane number, defaults to normal, and max_completion_tokens counts",
          "[cli]") {
  auto line = good(R"({"custom_id":"a","url":"/v1/chat/completions","priority":10,
    "body":{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":9}})");
  CHECK(line.priority == 10);
  CHECK(line.request.max_tokens == 9);
  CHECK(line.request.extra.is_null());
  line = good(R"({"custom_id":"b","url":"/v1/chat/completions",
    "body":{"model":"m","messages":[{"role":"user","content":"x"}]}})");
  CHECK(line.priority == 5);
}

TEST_CASE("an Anthropic /v1/messages line keeps its system prompt as a system message", "[cli]") {
  const auto line = good(R"({"custom_id":"c","url":"/v1/messages","body":{"model":"claude",
    "system":"terse","messages":[{"role":"user","content":"hi"}],"max_tokens":20}})");
  REQUIRE(line.request.messages.size() == 2);
  CHECK(line.request.messages[0].role == "system");
  CHECK(line.request.messages[0].content == "terse");
  CHECK(line.request.extra.is_null());
}

TEST_CASE("bad lines are reported with their line number and a code, never thrown", "[cli]") {
  CHECK(bad("{not json").code == "invalid_json");
  CHECK(bad("{not json").message.rfind("line 7: ", 0) == 0);
  CHECK(bad("[1,2]").code == "invalid_json");
  CHECK(bad(R"({"url":"/v1/chat/completions","body":{}})").code == "missing_custom_id");
  CHECK(bad(R"({"custom_id":"","url":"/v1/chat/completions","body":{}})").code == "missing_custom_id");
  const auto unknown = bad(R"({"custom_id":"x","url":"/v1/embeddings","body":{}})");
  CHECK(unknown.code == "unknown_url");
  CHECK(unknown.custom_id == "x");
  CHECK(bad(R"({"custom_id":"x","method":"GET","url":"/v1/chat/completions","body":{}})").code ==
        "invalid_method");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions"})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}]}})")
            .code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m","messages":[]}})")
            .code == "invalid_body");
  // an Anthropic system prompt alone is no conversation (it was sent, and refused with a 400)
  CHECK(bad(R"({"custom_id":"x","url":"/v1/messages","body":{"model":"m","system":"be terse",
    "max_tokens":5}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/messages","body":{"model":"m","max_tokens":5,
    "messages":[{"role":"system","content":"be terse"}]}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/messages","body":{"model":"m","max_tokens":5,
    "messages":[{"role":"developer","content":"be terse"}]}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m","max_tokens":0,
    "messages":[{"role":"user","content":"x"}]}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m","stream":true,
    "messages":[{"role":"user","content":"x"}]}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m",
    "messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}})").code ==
        "unsupported_content");
  const auto lane = bad(R"({"custom_id":"x","url":"/v1/chat/completions","priority":"urgent",
    "body":{"model":"m","messages":[{"role":"user","content":"x"}]}})");
  CHECK(lane.code == "unknown_priority");
  CHECK(lane.message.find("critical, high, normal, low, background") != std::string::npos);
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","priority":3,
    "body":{"model":"m","messages":[{"role":"user","content":"x"}]}})").code == "unknown_priority");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","client":")" + std::string(64, 'c') +
            R"(","body":{"model":"m","messages":[{"role":"user","content":"x"}]}})").code ==
        "invalid_client");
  // Fields of an unexpected type: bad lines too, not an exception that ends the run.
  CHECK(bad(R"({"custom_id":"x","method":1,"url":"/v1/chat/completions","body":{}})").code ==
        "invalid_method");
  CHECK(bad(R"({"custom_id":"x","method":null,"url":"/v1/chat/completions","body":{}})").code ==
        "invalid_method");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m",
    "messages":[{"role":"user","content":[{"type":5,"text":"x"}]}]}})").code ==
        "unsupported_content");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":7,
    "messages":[{"role":"user","content":"x"}]}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m","max_tokens":"9",
    "messages":[{"role":"user","content":"x"}]}})").code == "invalid_body");
  CHECK(bad(R"({"custom_id":"x","url":"/v1/chat/completions","body":{"model":"m",
    "messages":[{"role":7,"content":"x"}]}})").code == "invalid_body");
}

TEST_CASE("a success becomes a Batch API output line with the provider's answer", "[cli]") {
  laneq::Response r;
  r.status = 200;
  r.headers = {{"X-Request-Id", "req_abc"}};
  r.raw = json{{"id", "chatcmpl-1"}, {"choices", json::array()}};
  const json line = json::parse(laneq::cli::result_line("req-1", {}, r));
  CHECK(line["custom_id"] == "req-1");
  CHECK(line["id"] == laneq::cli::output_id("req-1"));
  CHECK(line["id"].get<std::string>().rfind("batch_req_", 0) == 0);
  CHECK(line["response"]["status_code"] == 200);
  CHECK(line["response"]["request_id"] == "req_abc");
  CHECK(line["response"]["body"]["id"] == "chatcmpl-1");
  CHECK(line["error"].is_null());
  CHECK(laneq::cli::output_id("req-1") != laneq::cli::output_id("req-2"));
}

TEST_CASE("failures carry an error code and message - answers the provider gave stay", "[cli]") {
  laneq::Response r;
  r.status = 429;
  r.error_message = "Rate limit reached";
  r.raw = json{{"error", {{"message", "Rate limit reached"}}}};
  json line = json::parse(
      laneq::cli::result_line("x", make_error_code(laneq::errc::rate_limited), r));
  CHECK(line["response"]["status_code"] == 429);
  CHECK(line["error"]["code"] == "rate_limited");
  CHECK(line["error"]["message"] == "Rate limit reached");
  line = json::parse(laneq::cli::result_line("y", make_error_code(laneq::errc::timeout), {}));
  CHECK(line["response"].is_null());
  CHECK(line["error"]["code"] == "timeout");
}

TEST_CASE("a resume reads back custom_ids, bad line numbers and torn lines", "[cli]") {
  laneq::Response ok;
  ok.status = 200;
  auto key = laneq::cli::read_output_line(laneq::cli::result_line("a", {}, ok));
  CHECK(key.complete);
  CHECK(key.custom_id == "a");
  CHECK(key.succeeded);
  key = laneq::cli::read_output_line(
      laneq::cli::result_line("b", make_error_code(laneq::errc::server_error), ok));
  CHECK(key.complete);
  CHECK_FALSE(key.succeeded);
  const BadLine b{12, "", "invalid_json", "line 12: not valid JSON"};
  key = laneq::cli::read_output_line(laneq::cli::bad_line_output(b));
  CHECK(key.complete);
  CHECK(key.bad_line_no == 12);
  CHECK_FALSE(key.succeeded);
  const std::string whole = laneq::cli::result_line("c", {}, ok);
  CHECK_FALSE(laneq::cli::read_output_line(whole.substr(0, whole.size() / 2)).complete);
}

TEST_CASE("a resume tells failures of a call from failures refused before one", "[cli]") {
  using laneq::errc;
  const auto called = [](errc e, int status = 0) {
    laneq::Response r;
    r.status = status;
    return laneq::cli::read_output_line(laneq::cli::result_line("a", make_error_code(e), r))
        .called;
  };
  CHECK(called(errc::network));  // no answer, but only a call gives it
  CHECK(called(errc::rate_limited, 429));
  CHECK(called(errc::overloaded));
  CHECK(called(errc::bad_request, 400));  // the provider answered
  CHECK(called(errc::interrupted_too_often));
  CHECK_FALSE(called(errc::bad_request));  // refused at submit
  CHECK_FALSE(called(errc::exceeds_rate_limit));
  CHECK_FALSE(called(errc::queue_full));
  CHECK_FALSE(called(errc::journal));
  const BadLine b{12, "x", "invalid_json", "line 12: not valid JSON"};
  CHECK_FALSE(laneq::cli::read_output_line(laneq::cli::bad_line_output(b)).called);
}

TEST_CASE("a message field a Request cannot carry is a bad line, not dropped", "[cli]") {
  for (const char* field : {R"("name":"alice")", R"("tool_call_id":"call_1")",
                            R"("tool_calls":[])"}) {
    const auto b = bad(std::string(R"({"custom_id":"x","url":"/v1/chat/completions","body":{
      "model":"m","messages":[{"role":"tool","content":"42",)") + field + "}]}}");
    CHECK(b.code == "unsupported_content");
    CHECK(b.message.find(std::string(field).substr(1, std::string(field).find('"', 1) - 1)) !=
          std::string::npos);
  }
}

TEST_CASE("a priority above INT64_MAX is named as written, not wrapped", "[cli]") {
  const auto b = bad(R"({"custom_id":"x","url":"/v1/chat/completions",
    "priority":18446744073709551615,"body":{"model":"m","messages":[{"role":"user","content":"x"}]}})");
  CHECK(b.code == "unknown_priority");
  CHECK_THAT(b.message, Catch::Contains("18446744073709551615"));
}

TEST_CASE("a line nested deeper than 256 levels is a bad line, not a crash", "[cli]") {
  // Its body's fields are copied into the Request: at 200,000 levels the copy overflowed the
  // stack and ended the run.
  const std::string head = R"({"custom_id":"deep","method":"POST","url":"/v1/chat/completions",)"
                           R"("body":{"model":"m","messages":[{"role":"user","content":"hi"}],)"
                           R"("metadata":)";
  const auto b = bad(head + std::string(200'000, '[') + std::string(200'000, ']') + "}}");
  CHECK(b.code == "invalid_json");
  CHECK(b.message == "line 7: JSON nested deeper than 256 levels");
  good(head + std::string(250, '[') + std::string(250, ']') + "}}");
}
