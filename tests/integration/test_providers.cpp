// OpenAIProvider and AnthropicProvider end to end: RequestQueue -> provider -> CurlTransport ->
// the mock API server on 127.0.0.1, and back. Every outcome the mock can inject, through both.
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <vector>

#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/detail/url_for_display.hpp"
#include "laneq/laneq.hpp"
#include "mock_api/mock_server_thread.hpp"
#include "support/run.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using laneq::errc;
using laneq::mock::MockOutcome;
using laneq::mock::OutcomeKind;
using laneq::test::chat;
using laneq::test::run;
using steady = std::chrono::steady_clock;

namespace {

auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);
const std::string secret_key = "sk-secret-do-not-leak-0123456789";

enum class Api { openai, anthropic };

// One provider of the kind under test, pointed at the mock, with its transport.
struct Client {
  Client(asio::io_context& io, Api api, const laneq::mock::MockServerThread& mock)
      : transport(io.get_executor()) {
    if (api == Api::openai)
      provider = std::make_unique<laneq::OpenAIProvider>(
          transport, laneq::OpenAIConfig{.api_key = secret_key, .base_url = mock.base_url()});
    else
      provider = std::make_unique<laneq::AnthropicProvider>(
          transport, laneq::AnthropicConfig{.api_key = secret_key, .base_url = mock.base_url()});
  }
  laneq::CurlTransport transport;
  std::unique_ptr<laneq::Provider> provider;
};

laneq::QueueConfig fast_retries(std::size_t workers = 2) {
  return {.workers = workers, .retry = {.max_attempts = 3, .base_delay = 5ms, .max_delay = 20ms}};
}

std::string api_name(Api a) { return a == Api::openai ? "openai" : "anthropic"; }

}  // namespace

TEST_CASE("both providers: success with text - usage and headers through the queue",
          "[providers]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock({.completion_tokens = 7});
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries());
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        laneq::Request req = chat("Tell me about lanes", 50);
        req.messages.insert(req.messages.begin(), {"system", "be brief"});
        laneq::Response r = co_await queue.submit(req);
        CHECK(r.status == 200);
        CHECK_THAT(r.text, Catch::Contains("mock reply"));
        CHECK(r.usage.output_tokens == 7);
        CHECK(r.usage.input_tokens > 0);
        CHECK_FALSE(r.finish_reason.empty());
        CHECK(r.raw.is_object());
        CHECK(r.attempts == 1);
        CHECK(r.header(api == Api::openai ? "x-ratelimit-limit-requests"
                                          : "anthropic-ratelimit-requests-limit") != nullptr);
        co_await queue.shutdown();
      });
      const auto stats = mock.stats();
      CHECK(stats["by_path"][api == Api::openai ? "/v1/chat/completions" : "/v1/messages"] == 1);
      CHECK(stats["by_model"]["sim-1"] == 1);
    }
  }
}

TEST_CASE("both providers: a 429 with headers pauses the limiter and the request succeeds later",
          "[providers][retry]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock;
      mock.script({MockOutcome{.kind = OutcomeKind::rate_limit, .retry_after_ms = 300ms}});
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries(1));
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        const auto t0 = steady::now();
        laneq::Response r = co_await queue.submit(chat());
        CHECK(r.attempts == 2);
        CHECK(steady::now() - t0 >= 300ms);
        co_await queue.shutdown();
      });
      CHECK(mock.stats()["sent_429"] == 1);
      const auto m = queue.metrics();
      CHECK(m.total.rate_limited == 1);
      CHECK(m.limiters.at(0).pauses == 1);
    }
  }
}

TEST_CASE("both providers: 500 and 529 are retried - 400 and quota are not", "[providers][retry]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock;
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries(1));
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        mock.script({MockOutcome{.kind = OutcomeKind::error, .status = 500},
                     MockOutcome{.kind = OutcomeKind::error, .status = 529,
                                 .retry_after_ms = 10ms}});
        auto [e1, r1] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        CHECK_FALSE(e1);
        CHECK(r1.attempts == 3);

        mock.script({MockOutcome{.kind = OutcomeKind::error, .status = 400}});
        auto [e2, r2] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        CHECK(e2 == errc::bad_request);
        CHECK(r2.status == 400);
        CHECK(r2.attempts == 1);
        CHECK_FALSE(r2.error_message.empty());

        mock.script({MockOutcome{.kind = OutcomeKind::insufficient_quota}});
        auto [e3, r3] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        // OpenAI says insufficient_quota; Anthropic a 400 "credit balance is too low"
        // (invalid_request_error): both are billing. Neither is retried.
        CHECK(e3 == errc::quota_exceeded);
        CHECK(r3.attempts == 1);

        mock.script({MockOutcome{.kind = OutcomeKind::too_large}});
        auto [e4, r4] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        CHECK(e4 == errc::request_too_large);
        CHECK(r4.attempts == 1);
        co_await queue.shutdown();
      });
    }
  }
}

TEST_CASE("both providers: a connection reset is retried - malformed JSON is malformed_response",
          "[providers]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock;
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries(1));
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        mock.script({MockOutcome{.kind = OutcomeKind::reset}});
        auto [e1, r1] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        CHECK_FALSE(e1);
        CHECK(r1.attempts == 2);

        // curl itself retries once when a reused connection dies before answering, so an
        // attempt may take two resets: six cover three attempts; the rest is cleared after.
        mock.script(std::vector<MockOutcome>(6, MockOutcome{.kind = OutcomeKind::reset}));
        auto [e2, r2] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        CHECK(e2 == errc::network);
        CHECK(r2.attempts == 3);
        CHECK_FALSE(r2.error_message.empty());
        mock.reset();

        mock.script({MockOutcome{.kind = OutcomeKind::malformed}});
        auto [e3, r3] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
        CHECK(e3 == errc::malformed_response);
        CHECK(r3.status == 200);
        CHECK(r3.attempts == 1);
        co_await queue.shutdown();
      });
    }
  }
}

TEST_CASE("both providers: a stalled body ends at the deadline with timeout", "[providers]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock;
      mock.script({MockOutcome{.kind = OutcomeKind::stall}});
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries(1));
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        const auto t0 = steady::now();
        // (2 s: room for the request to reach the mock first on a loaded machine)
        auto [ec, r] = co_await queue.async_submit(chat(), {.timeout = 2s}, tuple_awaitable);
        CHECK(ec == errc::timeout);
        CHECK(steady::now() - t0 < 5s);
        co_await queue.shutdown();
      });
      CHECK(mock.wait_stats([](const nlohmann::json& s) {
        return s["connections"]["closed_in_flight"].get<int>() >= 1;
      }));
    }
  }
}

TEST_CASE("both providers: cancelling in flight closes the connection the mock sees",
          "[providers]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock({.latency = 5s});
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries(1));
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        // cancelled once the mock has the request (not after a guessed delay)
        const auto mock_has_it = [&] { return mock.stats()["in_flight"] == 1; };
        auto res = co_await (queue.async_submit(chat(), {}, tuple_awaitable) ||
                             laneq::test::wait_until(mock_has_it));
        CHECK(res.index() == 1);
        co_await queue.shutdown();
      });
      CHECK(queue.metrics().total.cancelled == 1);
      CHECK(mock.wait_stats([](const nlohmann::json& s) {
        return s["connections"]["closed_in_flight"].get<int>() >= 1;
      }));
    }
  }
}

TEST_CASE("both providers: streaming delivers deltas as they arrive and the usage at the end",
          "[providers][stream]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      // 12 chunks 100 ms apart: a transport that buffered the whole body would hand every
      // delta over at the end, after ~1.1 s (600 ms of room below for a loaded machine's stalls)
      laneq::mock::MockServerThread mock({.stream_chunk_delay = 100ms, .completion_tokens = 12});
      asio::io_context io;
      Client c(io, api, mock);
      laneq::RequestQueue queue(io.get_executor(), *c.provider, fast_retries(1));
      queue.start();
      std::vector<std::string> deltas;
      std::chrono::steady_clock::time_point first_delta{}, done{};
      run(io, [&]() -> asio::awaitable<void> {
        laneq::Request req = chat("stream to me please", 64);
        req.stream = true;
        req.on_delta = [&](std::string_view d) {
          if (deltas.empty()) first_delta = std::chrono::steady_clock::now();
          deltas.emplace_back(d);
        };
        laneq::Response r = co_await queue.submit(req);
        done = std::chrono::steady_clock::now();
        CHECK(r.status == 200);
        CHECK(r.usage.output_tokens == 12);
        CHECK(r.usage.input_tokens > 0);
        std::string joined;
        for (auto& d : deltas) joined += d;
        CHECK(joined == r.text);
        CHECK_THAT(r.text, Catch::Contains("mock reply"));
        co_await queue.shutdown();
      });
      CHECK(deltas.size() > 1);
      CHECK(done - first_delta >= 500ms);  // the first delta came well before the end
    }
  }
}

TEST_CASE("both providers: a stream cut mid-way or an error event is an error - never a success",
          "[providers][stream]") {
  for (Api api : {Api::openai, Api::anthropic}) {
    DYNAMIC_SECTION(api_name(api)) {
      laneq::mock::MockServerThread mock;
      asio::io_context io;
      Client c(io, api, mock);
      laneq::QueueConfig cfg = fast_retries(1);
      cfg.retry.max_attempts = 1;
      laneq::RequestQueue queue(io.get_executor(), *c.provider, cfg);
      queue.start();
      run(io, [&]() -> asio::awaitable<void> {
        laneq::Request req = chat("stream", 64);
        req.stream = true;
        mock.script({MockOutcome{.kind = OutcomeKind::stream_cut}});
        auto [e1, r1] = co_await queue.async_submit(req, {}, tuple_awaitable);
        CHECK(e1 == errc::network);
        CHECK_FALSE(r1.error_message.empty());  // the transport's words (they were dropped)
        mock.script({MockOutcome{.kind = OutcomeKind::stream_error}});
        auto [e2, r2] = co_await queue.async_submit(req, {}, tuple_awaitable);
        CHECK(e2);
        CHECK(e2 != errc::network);
        CHECK_FALSE(r2.error_message.empty());
        co_await queue.shutdown();
      });
    }
  }
}

TEST_CASE("API keys never appear in errors - no key and no base URL is a clear config error",
          "[providers]") {
  laneq::mock::MockServerThread mock;
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  // A wrong key against a server that checks it: 401 -> auth.
  laneq::OpenAIProvider openai(transport, {.api_key = secret_key, .base_url = mock.base_url()});
  laneq::RequestQueue queue(io.get_executor(), openai, fast_retries(1));
  queue.start();
  mock.script({MockOutcome{.kind = OutcomeKind::error, .status = 401}});
  run(io, [&]() -> asio::awaitable<void> {
    try {
      co_await queue.submit(chat());
      FAIL("expected auth failure");
    } catch (const laneq::RequestError& e) {
      CHECK(e.code() == errc::auth);
      CHECK_THAT(std::string(e.what()), !Catch::Contains(secret_key));
      CHECK_THAT(e.response().error_message, !Catch::Contains(secret_key));
      CHECK(e.response().raw.dump().find(secret_key) == std::string::npos);
    }
    co_await queue.shutdown();
  });
  CHECK(laneq::to_prometheus(queue.metrics()).find(secret_key) == std::string::npos);

  ::unsetenv("OPENAI_API_KEY");
  ::unsetenv("OPENAI_BASE_URL");
  ::unsetenv("ANTHROPIC_API_KEY");
  ::unsetenv("ANTHROPIC_BASE_URL");
  try {
    laneq::OpenAIProvider p(transport);
    FAIL("accepted no key");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::invalid_config);
    CHECK_THAT(e.what(), Catch::Contains("OPENAI_API_KEY"));
  }
  CHECK_THROWS_WITH(laneq::AnthropicProvider(transport), Catch::Contains("ANTHROPIC_API_KEY"));
  // Environment variables are read when the config leaves them empty.
  ::setenv("ANTHROPIC_API_KEY", "k", 1);
  ::setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/", 1);
  laneq::AnthropicProvider from_env(transport);
  CHECK(from_env.url() == "http://127.0.0.1:9/v1/messages");
  ::unsetenv("ANTHROPIC_API_KEY");
  ::unsetenv("ANTHROPIC_BASE_URL");
  laneq::OpenAIProvider sdk_style(transport, {.base_url = "http://127.0.0.1:9/v1"});
  CHECK(sdk_style.url() == "http://127.0.0.1:9/v1/chat/completions");
  CHECK(laneq::OpenAIProvider(transport, {.base_url = "HTTPS://example.test"}).url() ==
        "HTTPS://example.test/v1/chat/completions");

  // A base URL without its scheme (curl would guess http://, a key would go out in the clear)
  // and an Anthropic default max_tokens that every request would be refused for.
  const auto config_error = [](auto make, const std::string& says) {
    try {
      make();
      FAIL("accepted: " + says);
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  };
  config_error([&] { laneq::OpenAIProvider(transport, {.api_key = "k", .base_url = "api.openai.com"}); },
               "\"api.openai.com\" must start with http:// or https://");
  ::setenv("ANTHROPIC_BASE_URL", "127.0.0.1:9", 1);
  config_error([&] { laneq::AnthropicProvider(transport, {.api_key = "k"}); },
               "(from ANTHROPIC_BASE_URL) must start with");
  ::unsetenv("ANTHROPIC_BASE_URL");
  config_error([&] { laneq::AnthropicProvider(transport, {.api_key = "k", .default_max_tokens = 0}); },
               "default_max_tokens must be >= 1");
}

namespace {

// What every fake transport below shares: the executor it reports.
class FakeTransport : public laneq::Transport {
 public:
  explicit FakeTransport(executor_type ex) : ex_(std::move(ex)) {}
  executor_type get_executor() const override { return ex_; }

 private:
  executor_type ex_;
};

// A transport that answers 200 with an event stream whose first line breaks the SSE parser's
// 4 MiB limit, then offers more, as a server would keep sending; like CurlTransport, an
// exception from on_body aborts the exchange (a network error).
class OversizedStreamTransport final : public FakeTransport {
 public:
  using FakeTransport::FakeTransport;
  void async_request(laneq::HttpRequest request, executor_type ex, asio::cancellation_slot,
                     laneq::HttpCompletion done) override {
    asio::post(ex, [this, request = std::move(request), done = std::move(done)]() mutable {
      laneq::HttpResponse resp;
      resp.status = 200;
      std::error_code ec;
      try {
        request.on_body("data: " + std::string((std::size_t{4} << 20) + 16, 'x'));
        for (int i = 0; i < 100; ++i) {
          request.on_body("more");
          ++chunks_after;
        }
      } catch (...) {
        ec = laneq::make_error_code(errc::network);
      }
      done(ec, std::move(resp));
    });
  }
  int chunks_after = 0;
};

// Answers every request with a minimal chat completion and keeps the bodies it was sent.
class BodyCapture final : public FakeTransport {
 public:
  using FakeTransport::FakeTransport;
  void async_request(laneq::HttpRequest request, executor_type ex, asio::cancellation_slot,
                     laneq::HttpCompletion done) override {
    bodies.push_back(nlohmann::json::parse(request.body));
    urls.push_back(request.url);
    asio::post(ex, [done = std::move(done)]() mutable {
      laneq::HttpResponse resp;
      resp.status = 200;
      resp.body = R"({"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],)"
                  R"("usage":{"prompt_tokens":1,"completion_tokens":1}})";
      done({}, std::move(resp));
    });
  }
  std::vector<nlohmann::json> bodies;
  std::vector<std::string> urls;
};

// Refuses every request unsent, as CurlTransport does one with an invalid header.
class RefusingTransport final : public FakeTransport {
 public:
  using FakeTransport::FakeTransport;
  void async_request(laneq::HttpRequest, executor_type ex, asio::cancellation_slot,
                     laneq::HttpCompletion done) override {
    ++calls;
    asio::post(ex, [done = std::move(done)]() mutable {
      laneq::HttpResponse resp;
      resp.error = "the request header \"X\" is not valid HTTP";
      done(laneq::make_error_code(errc::bad_request), std::move(resp));
    });
  }
  int calls = 0;
};

}  // namespace

TEST_CASE("a request the transport refuses unsent fails as bad_request, not a retried network "
          "error",
          "[providers]") {
  asio::io_context io;
  RefusingTransport transport(io.get_executor());
  laneq::OpenAIProvider provider(transport, {.api_key = "k", .base_url = "http://127.0.0.1:9"});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, resp] = co_await queue.async_submit(chat("hi"), {},
                                                  asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec == errc::bad_request);
    CHECK_THAT(resp.error_message, Catch::Contains("not valid HTTP"));
    co_await queue.shutdown();
  });
  CHECK(transport.calls == 1);
}

TEST_CASE("OpenAI's own endpoint gets max_completion_tokens, a compatible server max_tokens, "
          "unless the config names one",
          "[providers]") {
  asio::io_context io;
  BodyCapture transport(io.get_executor());
  laneq::OpenAIProvider official(transport, {.api_key = "k"});
  laneq::OpenAIProvider official_v1(transport, {.api_key = "k", .base_url = "https://api.openai.com/v1"});
  laneq::OpenAIProvider compatible(transport, {.api_key = "k", .base_url = "http://127.0.0.1:9"});
  laneq::OpenAIProvider chosen(transport, {.api_key = "k", .base_url = "http://127.0.0.1:9",
                                           .max_tokens_field = "max_completion_tokens"});
  // OpenAI's regional host (data residency) is OpenAI itself; a look-alike host is not
  laneq::OpenAIProvider regional(transport, {.api_key = "k", .base_url = "https://EU.api.openai.com/v1"});
  laneq::OpenAIProvider lookalike(transport, {.api_key = "k", .base_url = "https://xapi.openai.com.evil.test/v1"});
  // a user name and the root's dot name the same host
  laneq::OpenAIProvider with_user(transport, {.api_key = "k", .base_url = "https://u:p@api.openai.com./v1"});
  for (laneq::OpenAIProvider* p :
       {&official, &official_v1, &compatible, &chosen, &regional, &lookalike, &with_user}) {
    laneq::RequestQueue queue(io.get_executor(), *p, {.workers = 1});
    queue.start();
    run(io, [&]() -> asio::awaitable<void> {
      laneq::Request r = chat();
      r.max_tokens = 42;
      co_await queue.submit(r);
      co_await queue.shutdown();
    });
    io.restart();
  }
  REQUIRE(transport.bodies.size() == 7);
  for (const int i : {0, 1, 3, 4, 6}) {
    INFO("provider " << i);
    CHECK(transport.bodies[i]["max_completion_tokens"] == 42);
    CHECK_FALSE(transport.bodies[i].contains("max_tokens"));
  }
  for (const int i : {2, 5}) {
    INFO("provider " << i);
    CHECK(transport.bodies[i]["max_tokens"] == 42);
    CHECK_FALSE(transport.bodies[i].contains("max_completion_tokens"));
  }
  CHECK_THROWS_WITH(laneq::OpenAIProvider(transport, {.api_key = "k", .max_tokens_field = "max"}),
                    Catch::Contains("max_tokens_field must be"));
}

TEST_CASE("a stream that breaks the event parser's limits ends at once as malformed_response, "
          "not a retryable network error",
          "[providers][stream]") {
  asio::io_context io;
  OversizedStreamTransport transport(io.get_executor());
  laneq::OpenAIProvider provider(transport, {.api_key = "sk-test", .base_url = "http://127.0.0.1:9"});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    laneq::Request r = chat("hi");
    r.stream = true;
    auto [ec, resp] = co_await queue.async_submit(r, {}, asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec == errc::malformed_response);
    CHECK(resp.attempts == 1);  // not retried
    co_await queue.shutdown();
  });
  CHECK(transport.chunks_after == 0);  // nothing read after the parser gave up
}

namespace {

// Answers every request with 200 and the chunks given, through on_body when the request asked
// for a stream (as CurlTransport does with any 2xx body then); counts the calls.
class ChunkedAnswer final : public FakeTransport {
 public:
  // `then`: the transfer's outcome after the last chunk (e.g. the connection closed without
  // the last chunk of a chunked body).
  ChunkedAnswer(executor_type ex, std::vector<std::string> chunks, std::error_code then = {})
      : FakeTransport(std::move(ex)), chunks_(std::move(chunks)), then_(then) {}
  void async_request(laneq::HttpRequest request, executor_type ex, asio::cancellation_slot,
                     laneq::HttpCompletion done) override {
    ++calls;
    asio::post(ex, [this, request = std::move(request), done = std::move(done)]() mutable {
      laneq::HttpResponse resp;
      resp.status = 200;
      std::error_code ec;
      try {
        for (const auto& c : chunks_) {
          if (request.on_body) request.on_body(c);
          else resp.body += c;
        }
      } catch (...) {
        ec = laneq::make_error_code(errc::network);
      }
      done(ec ? ec : then_, std::move(resp));
    });
  }
  int calls = 0;

 private:
  std::vector<std::string> chunks_;
  std::error_code then_;
};

std::unique_ptr<laneq::Provider> provider_for(Api api, laneq::Transport& t) {
  if (api == Api::openai)
    return std::make_unique<laneq::OpenAIProvider>(
        t, laneq::OpenAIConfig{.api_key = "k", .base_url = "http://127.0.0.1:9"});
  return std::make_unique<laneq::AnthropicProvider>(
      t, laneq::AnthropicConfig{.api_key = "k", .base_url = "http://127.0.0.1:9"});
}

// A stream request through a queue (3 attempts) to `api` answered with `chunks`: its outcome,
// the deltas its on_delta saw and the calls the transport took.
struct StreamOutcome {
  std::error_code ec;
  laneq::Response resp;
  std::vector<std::string> deltas;
  int calls = 0;
};
StreamOutcome stream_through(Api api, std::vector<std::string> chunks, std::error_code then = {}) {
  asio::io_context io;
  ChunkedAnswer transport(io.get_executor(), std::move(chunks), then);
  auto provider = provider_for(api, transport);
  laneq::RequestQueue queue(io.get_executor(), *provider, fast_retries(1));
  queue.start();
  StreamOutcome out;
  run(io, [&]() -> asio::awaitable<void> {
    laneq::Request r = chat();
    r.stream = true;
    r.on_delta = [&](std::string_view d) { out.deltas.emplace_back(d); };
    std::tie(out.ec, out.resp) = co_await queue.async_submit(r, {}, tuple_awaitable);
    co_await queue.shutdown();
  });
  out.calls = transport.calls;
  return out;
}

}  // namespace

TEST_CASE("both providers: a stream request answered with one whole JSON body (a server that "
          "ignores stream) is that answer - not a cut stream retried and billed again",
          "[providers][stream]") {
  for (const Api api : {Api::openai, Api::anthropic}) {
    INFO(api_name(api));
    const std::string body =
        api == Api::openai
            ? R"({"choices":[{"message":{"role":"assistant","content":"whole answer"},)"
              R"("finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}})"
            : R"({"type":"message","content":[{"type":"text","text":"whole answer"}],)"
              R"("stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2}})";
    // blank lines and a BOM first, and the body in two pieces, as a network may cut it
    const auto o = stream_through(api, {"\r\n", "\n  \xEF\xBB\xBF", body.substr(0, 20), body.substr(20)});
    CHECK_FALSE(o.ec);
    CHECK(o.resp.text == "whole answer");
    CHECK(o.resp.usage.output_tokens == 2);
    CHECK(o.resp.attempts == 1);
    CHECK(o.calls == 1);  // was 3: each read as a network error and retried
    CHECK(o.deltas == std::vector<std::string>{"whole answer"});
  }
}

TEST_CASE("both providers: a stream that ended (its end marker, or an error event) before the "
          "transfer failed is that answer - not a network error retried and billed again",
          "[providers][stream]") {
  const auto cut = laneq::make_error_code(errc::network);  // e.g. curl: partial file
  for (const Api api : {Api::openai, Api::anthropic}) {
    INFO(api_name(api));
    const bool openai = api == Api::openai;
    const std::vector<std::string> complete =
        openai ? std::vector<std::string>{
                     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},"
                     "\"finish_reason\":\"stop\"}]}\n\n",
                     "data: [DONE]\n\n"}
               : std::vector<std::string>{
                     "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                     "\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
                     "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"};
    const auto ok = stream_through(api, complete, cut);
    CHECK_FALSE(ok.ec);  // was network
    CHECK(ok.resp.text == "Hi");
    CHECK(ok.calls == 1);
    // Cut before the end marker: a network error, as before.
    const auto short_of_end = stream_through(api, {complete.front()}, cut);
    CHECK(short_of_end.ec == errc::network);
    // An error event, then the cut: the event's error (neither is retried).
    const std::string refused =
        openai ? "data: {\"error\":{\"message\":\"You exceeded your current quota\","
                 "\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\"}}\n\n"
               : "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                 "\"permission_error\",\"message\":\"not allowed\"}}\n\n";
    const auto bad = stream_through(api, {refused}, cut);
    CHECK(bad.ec == (openai ? errc::quota_exceeded : errc::auth));  // was network
    CHECK(bad.calls == 1);
  }
}

TEST_CASE("both providers: a stream request answered with an HTML page is malformed_response, "
          "not retried",
          "[providers][stream]") {
  for (const Api api : {Api::openai, Api::anthropic}) {
    INFO(api_name(api));
    const auto o = stream_through(api, {"<html><body>Sign in to the Wi-Fi</body></html>"});
    CHECK(o.ec == errc::malformed_response);
    CHECK(o.calls == 1);
  }
}

TEST_CASE("both providers: blank lines (and a BOM) before the first event do not stop a stream",
          "[providers][stream]") {
  for (const Api api : {Api::openai, Api::anthropic}) {
    INFO(api_name(api));
    const std::vector<std::string> events =
        api == Api::openai
            ? std::vector<std::string>{
                  "\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
                  "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                  "data: [DONE]\n\n"}
            : std::vector<std::string>{
                  "\nevent: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
                  "{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
                  "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
                  "\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n"
                  "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                  "\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n"
                  "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"};
    for (const std::string lead : {"\n\r\n", "\xEF\xBB\xBF"}) {
      std::vector<std::string> chunks{lead, "\r"};
      chunks.insert(chunks.end(), events.begin(), events.end());
      const auto o = stream_through(api, chunks);
      CHECK_FALSE(o.ec);
      CHECK(o.resp.text == "a");
      CHECK(o.resp.finish_reason == (api == Api::openai ? "stop" : "end_turn"));
      CHECK(o.calls == 1);
    }
  }
}

TEST_CASE("both providers: a header that would not go on the wire as given is a config error "
          "naming it, never showing the key",
          "[providers]") {
  asio::io_context io;
  BodyCapture transport(io.get_executor());
  const std::string crlf_key = secret_key + "\r";  // read from a CRLF file
  const auto refused = [&](auto make, const std::string& words) {
    try {
      make();
      FAIL("accepted");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains(words));
      CHECK_THAT(e.what(), !Catch::Contains(secret_key));
    }
  };
  refused([&] { laneq::OpenAIProvider(transport, {.api_key = crlf_key}); }, "\"Authorization\" has a control character");
  refused([&] { laneq::AnthropicProvider(transport, {.api_key = crlf_key}); }, "\"x-api-key\" has a control character");
  refused([&] { laneq::OpenAIProvider(transport, {.api_key = "k", .organization = "org\n"}); },
          "\"OpenAI-Organization\"");
  refused([&] { laneq::OpenAIProvider(transport, {.api_key = "k", .extra_headers = {{"X Bad", "1"}}}); },
          "\"X Bad\" is not an HTTP token");
  refused([&] { laneq::AnthropicProvider(transport, {.api_key = "k", .extra_headers = {{"", "1"}}}); },
          "is not an HTTP token");
  refused([&] { laneq::OpenAIProvider(transport, {.api_key = "k", .extra_headers = {{"X-Empty", " "}}}); },
          "\"X-Empty\" has an empty value");
  refused([&] { laneq::AnthropicProvider(transport, {.api_key = "k", .version = ""}); },
          "\"anthropic-version\" has an empty value");
  // a base URL read with its line end; the message leaves out the query, which may hold a key
  refused([&] { laneq::OpenAIProvider(transport, {.base_url = "http://127.0.0.1:9/v1\r"}); },
          "has a space or a control character");
  refused([&] { laneq::OpenAIProvider(transport, {.base_url = "ftp://h/v1?key=" + secret_key}); },
          "\"ftp://h/v1\" must start with http:// or https://");
  // nor the user:password@ of a gateway's URL, with no scheme too
  refused([&] {
    laneq::OpenAIProvider(transport, {.api_key = "k", .base_url = "u:" + secret_key + "@gw/v1"});
  }, "\"gw/v1\" must start with http:// or https://");
  refused([&] {
    laneq::OpenAIProvider(transport, {.base_url = "https://u:" + secret_key + "@h/v1 "});
  }, "\"https://h/v1 \" has a space");
  refused([&] {
    laneq::AnthropicProvider(transport, {.api_key = "k", .base_url = "https://u:" + secret_key +
                                                                     "@/v1?key=" + secret_key});
  }, "\"https:///v1\" has no host name");
  // no host (https://${HOST} with HOST unset): curl would take "v1" of the path as the host
  for (const char* no_host : {"https://", "https:///v1", "http://?key=x", "https://user@/v1",
                              "https://:8080/v1"}) {
    refused([&] { laneq::OpenAIProvider(transport, {.api_key = "k", .base_url = no_host}); },
            "has no host name");
    refused([&] { laneq::AnthropicProvider(transport, {.api_key = "k", .base_url = no_host}); },
            "has no host name");
  }
  CHECK_NOTHROW(laneq::OpenAIProvider(transport, {.base_url = "http://u:p@h:1/v1?k=v"}));
  CHECK_NOTHROW(laneq::OpenAIProvider(transport, {.base_url = "http://[::1]:9/"}));
  // a tab and obs-text are allowed in a value
  CHECK_NOTHROW(laneq::OpenAIProvider(transport, {.api_key = "k", .extra_headers = {{"X-Ok", "a\tb \xc3\xa9"}}}));
}

TEST_CASE("OpenAI's own endpoint is recognised whatever the case of its scheme and host", "[providers]") {
  asio::io_context io;
  BodyCapture transport(io.get_executor());
  laneq::OpenAIProvider upper(transport, {.api_key = "k", .base_url = "HTTPS://API.OpenAI.com/v1"});
  laneq::RequestQueue queue(io.get_executor(), upper, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    laneq::Request r = chat();
    r.max_tokens = 7;
    co_await queue.submit(r);
    co_await queue.shutdown();
  });
  REQUIRE(transport.bodies.size() == 1);
  CHECK(transport.bodies[0]["max_completion_tokens"] == 7);
}

TEST_CASE("a URL as errors and the CLI show it has no user:password@, query or fragment - a "
          "malformed one neither",
          "[providers]") {
  using laneq::detail::url_for_display;
  CHECK(url_for_display("https://u:pw@h:8/v1?key=K#f") == "https://h:8/v1");
  CHECK(url_for_display("HTTP://[::1]:9/v1/") == "HTTP://[::1]:9/v1/");
  CHECK(url_for_display("http://h/v1\r\n") == "http://h/v1");
  CHECK(url_for_display("") == "");
  // malformed, as the URLs an error shows often are: the password must not show either way
  CHECK(url_for_display("user:sk-1@gw/v1") == "gw/v1");          // no scheme
  CHECK(url_for_display("https:/user:sk-1@gw/v1") == "...");     // a slash short
  CHECK(url_for_display("https://u:ab/sk-1@h/v1") == "https://...");   // '/' in the password
  CHECK(url_for_display("https://u:a?sk-1@h/v1") == "https://...");    // '?': no telling
  CHECK(url_for_display("https://h/v1?key=a@sk-1") == "https://...");  // (a query's '@')
  CHECK(url_for_display("https://u:a\tsk-1@h/v1") == "https://...");  // a tab in it
  CHECK(url_for_display("https://u:p@h\r\nX@y") == "https://...");    // (a line end's '@')
  CHECK(url_for_display("\nhttps://h") == "");
  CHECK(url_for_display("https://h/m/claude@2024:x") == "https://...");  // the path's: no telling
  CHECK(url_for_display("h/v1?next=https://sk-1") == "h/v1");    // no scheme: a query's "://"
}

TEST_CASE("a base URL's query stays at the end of the URL, after the path", "[providers]") {
  asio::io_context io;
  BodyCapture transport(io.get_executor());
  laneq::OpenAIProvider with_v1(transport, {.api_key = "k", .base_url = "http://127.0.0.1:9/v1/?key=abc"});
  laneq::AnthropicProvider plain(transport, {.api_key = "k", .base_url = "http://127.0.0.1:9/proxy?api-version=2"});
  for (laneq::Provider* p : std::initializer_list<laneq::Provider*>{&with_v1, &plain}) {
    laneq::RequestQueue queue(io.get_executor(), *p, {.workers = 1});
    queue.start();
    run(io, [&]() -> asio::awaitable<void> {
      co_await queue.async_submit(chat(), {}, tuple_awaitable);  // (the answer is OpenAI's shape)
      co_await queue.shutdown();
    });
    io.restart();
  }
  // was ".../v1/?key=abc/chat/completions" and "...?api-version=2/v1/messages"
  CHECK(transport.urls == std::vector<std::string>{"http://127.0.0.1:9/v1/chat/completions?key=abc",
                                                   "http://127.0.0.1:9/proxy/v1/messages?api-version=2"});
}

TEST_CASE("an OpenAI base URL with a path is the API root, as in the official SDK", "[providers]") {
  asio::io_context io;
  BodyCapture transport(io.get_executor());
  const auto url = [&](std::string base) {
    return laneq::OpenAIProvider(transport, {.api_key = "k", .base_url = std::move(base)}).url();
  };
  // Gemini's OpenAI-compatible endpoint, a gateway, the official form, and a bare host.
  CHECK(url("https://generativelanguage.googleapis.com/v1beta/openai/") ==
        "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions");
  CHECK(url("https://gateway.test/acct/gw/openai") == "https://gateway.test/acct/gw/openai/chat/completions");
  CHECK(url("https://api.openai.com/v1") == "https://api.openai.com/v1/chat/completions");
  CHECK(url("http://127.0.0.1:9") == "http://127.0.0.1:9/v1/chat/completions");
  CHECK(url("http://127.0.0.1:9/") == "http://127.0.0.1:9/v1/chat/completions");
  // Anthropic's SDK appends /v1/messages to any base: unchanged.
  CHECK(laneq::AnthropicProvider(transport, {.api_key = "k", .base_url = "https://gateway.test/anthropic"})
            .url() == "https://gateway.test/anthropic/v1/messages");
}

TEST_CASE("both providers, called directly: an on_delta that throws ends the call with internal "
          "and its words, not a network error",
          "[providers][stream]") {
  for (const Api api : {Api::openai, Api::anthropic}) {
    INFO(api_name(api));
    const std::string first_delta =
        api == Api::openai
            ? "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
            : "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
              "\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n";
    for (const bool whole : {false, true}) {
      INFO((whole ? "a whole body" : "a stream"));
      const std::string whole_body =
          api == Api::openai
              ? R"({"choices":[{"message":{"content":"a"},"finish_reason":"stop"}]})"
              : R"({"content":[{"type":"text","text":"a"}],"stop_reason":"end_turn"})";
      asio::io_context io;
      ChunkedAnswer transport(io.get_executor(), {whole ? whole_body : first_delta});
      auto provider = provider_for(api, transport);
      laneq::Request r = chat();
      r.stream = true;
      r.on_delta = [](std::string_view) { throw std::runtime_error("the UI is gone"); };
      std::error_code got;
      laneq::Response resp;
      provider->async_call(r, {.executor = laneq::CallExecutor(asio::make_strand(io)), .cancel = {}},
                           [&](std::error_code ec, laneq::Response x) {
                             got = ec;
                             resp = std::move(x);
                           });
      io.run();
      CHECK(got == errc::internal);  // was network (and so retried by a caller's own loop)
      CHECK(resp.error_type == "on_delta");
      CHECK(resp.error_message == "Request::on_delta threw: the UI is gone");
    }
  }
}
