// Token estimates: the default prompt estimator and max_tokens reservation.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "laneq/token_estimate.hpp"

using laneq::Request;

TEST_CASE("the default estimate is about 4 bytes per token plus chat framing", "[tokens]") {
  // "user" (4) + 400 bytes of content = 404 bytes -> 101 tokens, + 4 framing + 3 priming
  Request r{.model = "m", .messages = {{"user", std::string(400, 'a')}}, .max_tokens = 100};
  CHECK(laneq::estimate_prompt_tokens(r) == 108);
  const auto e = laneq::estimate_tokens(r);
  CHECK(e.prompt == 108);
  CHECK(e.completion == 100);
  CHECK(e.total() == 208);
}

TEST_CASE("the estimate grows with every message and with extra JSON", "[tokens]") {
  Request one{.messages = {{"user", "hello"}}};
  Request two{.messages = {{"system", "be brief"}, {"user", "hello"}}};
  CHECK(laneq::estimate_prompt_tokens(two) > laneq::estimate_prompt_tokens(one));
  Request tools = one;
  tools.extra = {{"tools", {{{"type", "function"}, {"name", std::string(200, 'x')}}}}};
  CHECK(laneq::estimate_prompt_tokens(tools) >= laneq::estimate_prompt_tokens(one) + 50);
}

TEST_CASE("max_tokens 0 reserves the configured default completion", "[tokens]") {
  Request r{.messages = {{"user", "hi"}}};
  CHECK(laneq::estimate_tokens(r).completion == 4096);
  CHECK(laneq::estimate_tokens(r, 1000).completion == 1000);
}

TEST_CASE("a max_tokens or max_completion_tokens in extra is reserved when larger: the body "
          "sends it too", "[tokens]") {
  Request r{.messages = {{"user", "hi"}}};
  r.extra = {{"max_completion_tokens", 50000}};
  CHECK(laneq::estimate_tokens(r).completion == 50000);  // not the default's 4096
  CHECK(laneq::reserved_output_tokens(r, 4096) == 50000);
  r.max_tokens = 100;
  CHECK(laneq::reserved_output_tokens(r, 4096) == 50000);
  // Smaller than the field: the provider's field (max_completion_tokens for api.openai.com)
  // goes out beside extra's max_tokens, and the server may take the field's.
  r.max_tokens = 5000;
  r.extra = {{"max_tokens", 20}};
  CHECK(laneq::reserved_output_tokens(r, 4096) == 5000);
  r.extra = {{"max_tokens", 20}, {"max_completion_tokens", 7000}};
  CHECK(laneq::reserved_output_tokens(r, 4096) == 7000);
  r.extra = {{"max_tokens", "many"}, {"user", "u"}};  // not a count: the field's
  CHECK(laneq::reserved_output_tokens(r, 4096) == 5000);
  r.extra = {{"max_tokens", 9000.5}};
  CHECK(laneq::reserved_output_tokens(r, 4096) == 9001);
  r.max_tokens = 100;
  r.extra = {{"max_tokens", nullptr}};  // the provider's default
  CHECK(laneq::reserved_output_tokens(r, 4096) == 4096);
  r.extra = {{"max_tokens", std::numeric_limits<std::uint64_t>::max()}};
  CHECK(laneq::reserved_output_tokens(r, 4096) == std::int64_t{1} << 50);
  r.extra = {{"max_tokens", 1e300}};
  CHECK(laneq::reserved_output_tokens(r, 4096) == std::int64_t{1} << 50);
  r.extra = {{"max_tokens", -7}};
  CHECK(laneq::reserved_output_tokens(r, 4096) == 100);
}

TEST_CASE("a pluggable prompt estimator replaces the default, never below zero", "[tokens]") {
  Request r{.messages = {{"user", "hi"}}, .max_tokens = 10};
  CHECK(laneq::estimate_tokens(r, 4096, [](const Request&) { return 42; }).prompt == 42);
  CHECK(laneq::estimate_tokens(r, 4096, [](const Request&) { return -5; }).prompt == 0);
}

TEST_CASE("an estimate's parts stay within [0, 2^50]: total() cannot overflow", "[tokens]") {
  Request r{.messages = {{"user", "hi"}}, .max_tokens = 10};
  const auto infinite = [](const Request&) { return std::numeric_limits<std::int64_t>::max(); };
  const auto e = laneq::estimate_tokens(r, 4096, infinite);
  CHECK(e.prompt == std::int64_t{1} << 50);
  CHECK(e.total() == (std::int64_t{1} << 50) + 10);
  CHECK(laneq::estimate_tokens(Request{.messages = {{"user", "hi"}}}, -5).completion == 0);
}

TEST_CASE("non-ASCII text is overestimated, never under", "[tokens]") {
  // 100 CJK characters (3 bytes each): tokenizers give about one token each, often more; bytes
  // / 4 would say 75. Counted 1.5 each.
  std::string cjk;
  for (int i = 0; i < 100; ++i) cjk += "\xe6\x97\xa5";
  CHECK(laneq::estimate_prompt_tokens(Request{.messages = {{"", cjk}}}) == 150 + 4 + 3);
  // 10 emoji (4 bytes each): two or more tokens each; counted 2
  std::string emoji;
  for (int i = 0; i < 10; ++i) emoji += "\xf0\x9f\x98\x80";
  CHECK(laneq::estimate_prompt_tokens(Request{.messages = {{"", emoji}}}) == 20 + 4 + 3);
  // 2-byte scripts (Cyrillic: ~0.4 tokens per character) stay at bytes / 4: 100 -> 50
  std::string cyrillic;
  for (int i = 0; i < 100; ++i) cyrillic += "\xd0\x96";
  CHECK(laneq::estimate_prompt_tokens(Request{.messages = {{"", cyrillic}}}) == 50 + 4 + 3);
  // any mix, any length and alignment: the same as counting character by character
  const std::string pieces[] = {"a", "\xd0\x96", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "hello "};
  std::uint64_t seed = 7;
  for (int round = 0; round < 200; ++round) {
    std::string text;
    std::int64_t narrow = 0, wide3 = 0, wide4 = 0;
    const int count = static_cast<int>(seed % 40);
    for (int i = 0; i < count; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const std::string& piece = pieces[(seed >> 33) % 5];
      text += piece;
      if (piece.size() == 3) ++wide3;
      else if (piece.size() == 4) ++wide4;
      else narrow += static_cast<std::int64_t>(piece.size());
    }
    CHECK(laneq::estimate_prompt_tokens(Request{.messages = {{"", text}}}) ==
          (narrow + 3) / 4 + (3 * wide3 + 1) / 2 + 2 * wide4 + 4 + 3);
  }
  // broken UTF-8 never counts below zero narrow bytes
  CHECK(laneq::estimate_prompt_tokens(Request{.messages = {{"", "\xf0"}}}) >= 2 + 4 + 3);
}

TEST_CASE("extra JSON with invalid UTF-8 is estimated, never below valid text of its length",
          "[tokens]") {
  // The strict dump threw json type_error 316 here; the queue reported the estimator as failed.
  for (const std::size_t n : {std::size_t{1}, std::size_t{100}}) {
    Request bad{.messages = {{"user", "hi"}}};
    bad.extra = {{"x", std::string(n, '\xff')}};
    Request good = bad;
    good.extra = {{"x", std::string(n, 'a')}};
    INFO("bytes: " << n);
    std::int64_t estimate = 0;
    CHECK_NOTHROW(estimate = laneq::estimate_prompt_tokens(bad));
    CHECK(estimate >= laneq::estimate_prompt_tokens(good));
    CHECK(laneq::estimate_tokens(bad).prompt == estimate);  // the queue's path
  }
}
