// Retry policy: which failures are retried and after how long. Pure logic, every value exact.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <system_error>

#include "laneq/error.hpp"
#include "laneq/rate_limit_headers.hpp"
#include "laneq/retry_policy.hpp"

using namespace std::chrono_literals;
using laneq::decide_retry;
using laneq::errc;
using laneq::is_retryable;
using laneq::RateLimitInfo;
using laneq::RetryDecision;
using laneq::RetryPolicy;

namespace {

std::error_code err(errc e) { return laneq::make_error_code(e); }

// A provider failure that is not a laneq code: only the status (or x-should-retry) decides.
const std::error_code some_error = std::make_error_code(std::errc::protocol_error);

// The laneq code a provider adapter reports for an HTTP status.
std::error_code err_for(int status) {
  switch (status) {
    case 400: case 404: case 422: return err(errc::bad_request);
    case 401: case 403: return err(errc::auth);
    case 408: return err(errc::timeout);
    case 413: return err(errc::request_too_large);
    case 429: return err(errc::rate_limited);
    case 503: case 529: return err(errc::overloaded);
    default: return err(errc::server_error);
  }
}

RateLimitInfo from_headers(const laneq::Headers& h) {
  return laneq::parse_rate_limit_headers(h, std::chrono::system_clock::now());
}

RateLimitInfo with_retry_after(std::chrono::nanoseconds d) {
  RateLimitInfo info;
  info.retry_after = d;
  return info;
}

RateLimitInfo with_should_retry(bool b) {
  RateLimitInfo info;
  info.should_retry = b;
  return info;
}

const RetryPolicy policy{};  // 3 attempts, 500 ms base, 8 s cap, 60 s max retry-after
const RateLimitInfo no_headers{};

}  // namespace

TEST_CASE("retryable HTTP statuses are retried: 408, 409, 429 and 5xx (incl. 529)", "[retry]") {
  for (int status : {408, 409, 429, 500, 502, 503, 504, 529, 599}) {
    INFO("status " << status);
    CHECK(is_retryable(err_for(status), status, std::nullopt));
    CHECK(is_retryable(some_error, status, std::nullopt));  // the status alone decides
    const RetryDecision d = decide_retry(policy, 1, err_for(status), status, no_headers, 0.5);
    CHECK(d.retry);
    CHECK_FALSE(d.from_server);
  }
}

TEST_CASE("connection failures without a status are retried", "[retry]") {
  CHECK(is_retryable(err(errc::network), 0, std::nullopt));
  CHECK(is_retryable(err(errc::timeout), 0, std::nullopt));  // rule 5: provider timeouts
  const RetryDecision d = decide_retry(policy, 1, err(errc::network), 0, no_headers, 0.5);
  CHECK(d.retry);
  CHECK_FALSE(d.pause_all);
  CHECK_FALSE(d.from_server);
  CHECK(d.delay == 250ms);

  // Neither success nor an unknown failure without a status is retried.
  CHECK_FALSE(is_retryable(std::error_code{}, 0, std::nullopt));
  CHECK_FALSE(is_retryable(some_error, 0, std::nullopt));
  CHECK_FALSE(decide_retry(policy, 1, some_error, 0, no_headers, 0.5).retry);
}

TEST_CASE("client errors are never retried: 400, 401, 403, 404, 422", "[retry]") {
  for (int status : {400, 401, 403, 404, 413, 422}) {
    INFO("status " << status);
    CHECK_FALSE(is_retryable(err_for(status), status, std::nullopt));
    CHECK_FALSE(is_retryable(some_error, status, std::nullopt));  // by the status rule alone
    CHECK_FALSE(decide_retry(policy, 1, err_for(status), status, no_headers, 0.5).retry);
    CHECK_FALSE(decide_retry(policy, 1, some_error, status, no_headers, 0.5).retry);
  }
  // Other non-error statuses are not retried either.
  for (int status : {200, 301, 410})
    CHECK_FALSE(is_retryable(some_error, status, std::nullopt));
}

TEST_CASE("quota_exceeded and request_too_large are never retried, even with status 429",
          "[retry]") {
  for (errc e : {errc::quota_exceeded, errc::request_too_large}) {
    INFO("errc " << static_cast<int>(e));
    CHECK_FALSE(is_retryable(err(e), 429, std::nullopt));
    CHECK_FALSE(is_retryable(err(e), 0, std::nullopt));
    CHECK_FALSE(is_retryable(err(e), 500, std::nullopt));
    CHECK_FALSE(decide_retry(policy, 1, err(e), 429, no_headers, 0.5).retry);
    // A retry-after does not make it retryable, nor does x-should-retry: true.
    CHECK_FALSE(decide_retry(policy, 1, err(e), 429, with_retry_after(1s), 0.5).retry);
    CHECK_FALSE(is_retryable(err(e), 429, true));
    CHECK_FALSE(decide_retry(policy, 1, err(e), 429, with_should_retry(true), 0.5).retry);
  }
  CHECK_FALSE(is_retryable(err(errc::request_too_large), 413, std::nullopt));
}

TEST_CASE("x-should-retry overrides the status rule both ways", "[retry]") {
  SECTION("true retries what the status rule would not") {
    for (int status : {400, 401, 404, 422}) {
      INFO("status " << status);
      CHECK(is_retryable(some_error, status, true));
      CHECK(decide_retry(policy, 1, some_error, status, with_should_retry(true), 0.5).retry);
    }
    CHECK(is_retryable(some_error, 0, true));
  }
  SECTION("false stops what the status rule would retry") {
    for (int status : {408, 409, 429, 500, 503, 529}) {
      INFO("status " << status);
      CHECK_FALSE(is_retryable(err_for(status), status, false));
      CHECK_FALSE(decide_retry(policy, 1, err_for(status), status, with_should_retry(false), 0.5)
                      .retry);
    }
    CHECK_FALSE(is_retryable(err(errc::network), 0, false));
  }
  SECTION("read from the header, any case") {
    const auto yes = from_headers({{"X-Should-Retry", "TRUE"}});
    REQUIRE(yes.should_retry == true);
    CHECK(decide_retry(policy, 1, some_error, 400, yes, 0.5).retry);
    const auto no = from_headers({{"x-should-retry", "false"}});
    REQUIRE(no.should_retry == false);
    CHECK_FALSE(decide_retry(policy, 1, err_for(503), 503, no, 0.5).retry);
  }
  SECTION("a 200's header does not judge an error that came later in its stream") {
    CHECK(is_retryable(err(errc::overloaded), 200, false));
    CHECK(decide_retry(policy, 1, err(errc::overloaded), 200, with_should_retry(false), 0.5).retry);
    CHECK_FALSE(is_retryable(err(errc::bad_request), 200, true));
    // Nor its retry-after (a proxy's, on every answer): a back-off, not 120 s that would fail
    // the request for exceeding max_retry_after
    const RetryDecision d =
        decide_retry(policy, 1, err(errc::overloaded), 200, with_retry_after(120s), 0.5);
    CHECK(d.retry);
    CHECK_FALSE(d.from_server);
    CHECK(d.delay < 1s);
  }
  SECTION("a 429 the server says not to retry still tells everyone to hold off") {
    auto info = from_headers({{"x-should-retry", "false"}, {"retry-after", "2"}});
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5);
    CHECK_FALSE(d.retry);
    CHECK(d.pause_all);
    CHECK(d.from_server);
    CHECK(d.delay == 2s);
  }
}

TEST_CASE("cancelled and shutting_down are never retried, whatever the server says", "[retry]") {
  for (errc e : {errc::cancelled, errc::shutting_down}) {
    INFO("errc " << static_cast<int>(e));
    for (int status : {0, 429, 500, 503}) {
      CHECK_FALSE(is_retryable(err(e), status, std::nullopt));
      CHECK_FALSE(is_retryable(err(e), status, true));
      CHECK_FALSE(decide_retry(policy, 1, err(e), status, with_should_retry(true), 0.5).retry);
    }
  }
}

TEST_CASE("max_attempts bounds the attempts, the first included", "[retry]") {
  const auto ec = err(errc::server_error);
  CHECK(decide_retry(policy, 1, ec, 500, no_headers, 0.5).retry);
  CHECK(decide_retry(policy, 2, ec, 500, no_headers, 0.5).retry);
  CHECK_FALSE(decide_retry(policy, 3, ec, 500, no_headers, 0.5).retry);  // attempts == max
  CHECK_FALSE(decide_retry(policy, 4, ec, 500, no_headers, 0.5).retry);

  RetryPolicy once;
  once.max_attempts = 1;  // never retry
  CHECK_FALSE(decide_retry(once, 1, ec, 500, no_headers, 0.5).retry);
  CHECK_FALSE(decide_retry(once, 1, err(errc::network), 0, no_headers, 0.5).retry);

  RetryPolicy five;
  five.max_attempts = 5;
  CHECK(decide_retry(five, 4, ec, 500, no_headers, 0.5).retry);
  CHECK_FALSE(decide_retry(five, 5, ec, 500, no_headers, 0.5).retry);

  // Attempts used up: no retry, but a 429's pause is still reported.
  const RetryDecision d = decide_retry(policy, 3, err_for(429), 429, with_retry_after(3s), 0.5);
  CHECK_FALSE(d.retry);
  CHECK(d.pause_all);
  CHECK(d.delay == 3s);
}

TEST_CASE("backoff is full jitter over base times 2^(attempts-1), capped at max_delay",
          "[retry]") {
  RetryPolicy p;
  p.max_attempts = 100;  // the delay is computed whatever the count; keep retry true
  p.base_delay = 500ms;
  p.max_delay = 8000ms;
  const auto ec = err(errc::server_error);

  // attempts:                          1      2       3       4       5       6 (capped)
  const std::chrono::milliseconds half[] = {250ms, 500ms, 1000ms, 2000ms, 4000ms, 4000ms};
  const std::chrono::microseconds near_one[] = {499500us, 999000us, 1998000us,
                                                3996000us, 7992000us, 7992000us};
  for (std::uint32_t attempts = 1; attempts <= 6; ++attempts) {
    INFO("attempts " << attempts);
    const RetryDecision a = decide_retry(p, attempts, ec, 500, no_headers, 0.5);
    CHECK(a.retry);
    CHECK_FALSE(a.from_server);
    CHECK(a.delay.count() == std::chrono::nanoseconds(half[attempts - 1]).count());
    const RetryDecision b = decide_retry(p, attempts, ec, 500, no_headers, 0.999);
    CHECK(b.delay.count() == std::chrono::nanoseconds(near_one[attempts - 1]).count());
    const std::chrono::nanoseconds ceiling =
        std::min<std::chrono::nanoseconds>(p.max_delay, p.base_delay * (1 << (attempts - 1)));
    CHECK(b.delay < ceiling);
    CHECK(decide_retry(p, attempts, ec, 500, no_headers, 0.0).delay.count() == 0);
  }

  SECTION("the cap holds for any number of attempts") {
    for (std::uint32_t attempts : {7u, 10u, 63u, 64u, 1000u, 4'000'000'000u}) {
      INFO("attempts " << attempts);
      CHECK(decide_retry(p, attempts, ec, 500, no_headers, 0.5).delay == 4000ms);
      CHECK(decide_retry(p, attempts, ec, 500, no_headers, 0.999).delay == 7992ms);
    }
  }
  SECTION("a smaller cap cuts in earlier") {
    RetryPolicy q = p;
    q.base_delay = 100ms;
    q.max_delay = 1s;
    CHECK(decide_retry(q, 4, ec, 500, no_headers, 0.5).delay == 400ms);  // 800 ms uncapped
    CHECK(decide_retry(q, 5, ec, 500, no_headers, 0.5).delay == 500ms);  // 1600 -> 1000 ms
  }
  SECTION("a cap or base of milliseconds::max() is no cap, not an overflow") {
    // as nanoseconds they overflowed to a negative cap: every retry came at once
    RetryPolicy q = p;
    q.max_delay = std::chrono::milliseconds::max();
    CHECK(decide_retry(q, 2, ec, 500, no_headers, 0.5).delay == 500ms);
    CHECK(decide_retry(q, 40, ec, 500, no_headers, 0.5).delay == 24h * 365 / 2);  // a year's cap
    q.base_delay = std::chrono::milliseconds::max();
    CHECK(decide_retry(q, 1, ec, 500, no_headers, 0.5).delay == 24h * 365 / 2);
    q.max_delay = 8000ms;
    CHECK(decide_retry(q, 1, ec, 500, no_headers, 0.5).delay == 4000ms);
  }
  SECTION("a 429 without retry-after or an exhausted bucket backs off too") {
    const RetryDecision d = decide_retry(p, 2, err_for(429), 429, no_headers, 0.5);
    CHECK(d.retry);
    CHECK_FALSE(d.from_server);
    CHECK(d.delay == 875ms);  // (a wait for everyone: from 3/4 of the bound, below)
  }
}

TEST_CASE("a back-off that holds every worker (429, 503, 529) waits at least 3/4 of its bound, "
          "as the official SDKs do - one that holds its own request keeps full jitter",
          "[retry]") {
  RetryPolicy p;
  p.base_delay = 500ms;
  p.max_delay = 8000ms;
  for (const int status : {429, 503, 529}) {
    INFO("status " << status);
    const RetryDecision low = decide_retry(p, 1, err_for(status), status, no_headers, 0.0);
    CHECK(low.pause_all);
    CHECK(low.delay == 375ms);  // not 0: every worker would call again at once
    CHECK(low.pause == 375ms);
    const RetryDecision high = decide_retry(p, 3, err_for(status), status, no_headers, 0.999);
    CHECK(high.delay < 2000ms);
    CHECK(high.delay >= 1998ms);
  }
  const RetryDecision own = decide_retry(p, 1, err_for(500), 500, no_headers, 0.0);
  CHECK_FALSE(own.pause_all);
  CHECK(own.delay == 0ms);
}

TEST_CASE("retry-after overrides the backoff and marks the delay as the server's", "[retry]") {
  SECTION("on a 429, whatever the jitter") {
    for (double u : {0.0, 0.5, 0.999}) {
      const RetryDecision d =
          decide_retry(policy, 2, err_for(429), 429, with_retry_after(1500ms), u);
      CHECK(d.retry);
      CHECK(d.from_server);
      CHECK(d.delay == 1500ms);
    }
  }
  SECTION("on a 503") {
    const RetryDecision d = decide_retry(policy, 1, err_for(503), 503, with_retry_after(2s), 0.5);
    CHECK(d.retry);
    CHECK(d.from_server);
    CHECK(d.delay == 2s);
  }
  SECTION("zero is no advice: back off (the official SDKs take it only when above 0)") {
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, with_retry_after(0s), 0.5);
    CHECK(d.retry);
    CHECK_FALSE(d.from_server);
    CHECK(d.delay == 437500us);  // 3/4 of 500 ms + 0.5 x its last quarter
    // ... or the reset of the bucket the server reports as exhausted
    RateLimitInfo info = with_retry_after(0s);
    info.requests.remaining = 0;
    info.requests.reset_after = 3s;
    const RetryDecision r = decide_retry(policy, 1, err_for(429), 429, info, 0.5);
    CHECK(r.from_server);
    CHECK(r.delay == 3s);
    // a reset of 0 is no advice either (Azure sends x-ratelimit-reset-tokens: 0)
    info.requests.reset_after = 0s;
    const RetryDecision z = decide_retry(policy, 1, err_for(429), 429, info, 0.5);
    CHECK_FALSE(z.from_server);
    CHECK(z.delay == 437500us);
  }
  SECTION("from the headers: retry-after seconds, retry-after-ms wins") {
    const RetryDecision a =
        decide_retry(policy, 1, err_for(429), 429, from_headers({{"retry-after", "3"}}), 0.5);
    CHECK(a.from_server);
    CHECK(a.delay == 3s);
    const RetryDecision b = decide_retry(
        policy, 1, err_for(429), 429,
        from_headers({{"Retry-After", "10"}, {"retry-after-ms", "250"}}), 0.5);
    CHECK(b.from_server);
    CHECK(b.delay == 250ms);
  }
  SECTION("retry-after wins over an exhausted bucket's reset") {
    RateLimitInfo info = with_retry_after(1s);
    info.requests.remaining = 0;
    info.requests.reset_after = 5s;
    CHECK(decide_retry(policy, 1, err_for(429), 429, info, 0.5).delay == 1s);
  }
}

TEST_CASE("a retry-after beyond max_retry_after fails the request but still reports the pause",
          "[retry]") {
  RetryPolicy p;
  p.max_retry_after = 10s;
  const RetryDecision over = decide_retry(p, 1, err_for(429), 429, with_retry_after(11s), 0.5);
  CHECK_FALSE(over.retry);
  CHECK(over.delay == 11s);
  CHECK(over.pause_all);
  CHECK(over.from_server);

  const RetryDecision at = decide_retry(p, 1, err_for(429), 429, with_retry_after(10s), 0.5);
  CHECK(at.retry);  // exactly the maximum is still waited for
  CHECK(at.delay == 10s);

  // The default maximum is a minute.
  CHECK_FALSE(decide_retry(policy, 1, err_for(429), 429, with_retry_after(120s), 0.5).retry);
  CHECK(decide_retry(policy, 1, err_for(429), 429, with_retry_after(60s), 0.5).retry);

  // An exhausted bucket's reset beyond the maximum also fails the request.
  RateLimitInfo info;
  info.tokens.remaining = 0;
  info.tokens.reset_after = 30s;
  const RetryDecision reset = decide_retry(p, 1, err_for(429), 429, info, 0.5);
  CHECK_FALSE(reset.retry);
  CHECK(reset.delay == 30s);
  CHECK(reset.pause_all);
}

TEST_CASE("a 429 without retry-after waits for the reset of an exhausted bucket", "[retry]") {
  SECTION("set directly") {
    RateLimitInfo info;
    info.requests.remaining = 0;
    info.requests.reset_after = 2s;
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5);
    CHECK(d.retry);
    CHECK(d.from_server);
    CHECK(d.pause_all);
    CHECK(d.delay == 2s);
  }
  SECTION("parsed from OpenAI headers") {
    const auto info = from_headers({{"x-ratelimit-limit-requests", "60"},
                                    {"x-ratelimit-remaining-requests", "0"},
                                    {"x-ratelimit-reset-requests", "2s"},
                                    {"x-ratelimit-remaining-tokens", "5000"},
                                    {"x-ratelimit-reset-tokens", "20s"}});
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5);
    CHECK(d.retry);
    CHECK(d.from_server);
    CHECK(d.delay == 2s);  // the tokens bucket is not exhausted: its reset does not count
  }
  SECTION("several exhausted buckets: the latest reset") {
    RateLimitInfo info;
    info.requests.remaining = 0;
    info.requests.reset_after = 2s;
    info.output_tokens.remaining = 0;
    info.output_tokens.reset_after = 5s;
    CHECK(decide_retry(policy, 1, err_for(429), 429, info, 0.5).delay == 5s);
  }
  SECTION("a bucket with units left or without a reset is no reason to wait") {
    RateLimitInfo info;
    info.requests.remaining = 3;
    info.requests.reset_after = 2s;
    info.tokens.remaining = 0;  // no reset_after
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5);
    CHECK_FALSE(d.from_server);
    CHECK(d.delay == 437500us);  // backoff (from 3/4 of 500 ms: it holds everyone)
  }
  SECTION("only for a 429: other failures back off") {
    RateLimitInfo info;
    info.requests.remaining = 0;
    info.requests.reset_after = 2s;
    const RetryDecision d = decide_retry(policy, 1, err_for(500), 500, info, 0.5);
    CHECK(d.retry);
    CHECK_FALSE(d.from_server);
    CHECK(d.delay == 250ms);
  }
}

TEST_CASE("a 429 without retry-after holds its own request, not the others, for a bucket with "
          "some left but less than it needs", "[retry]") {
  const laneq::RateCost need{.requests = 1, .input_tokens = 1000, .output_tokens = 200};
  SECTION("OpenAI: 500 tokens left of 30,000 per minute, full again in 59 s, 1,200 needed") {
    const auto info = from_headers({{"x-ratelimit-limit-tokens", "30000"},
                                    {"x-ratelimit-remaining-tokens", "500"},
                                    {"x-ratelimit-reset-tokens", "59s"},
                                    {"x-ratelimit-remaining-requests", "10"},
                                    {"x-ratelimit-reset-requests", "1s"}});
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.retry);
    CHECK(d.pause_all);
    CHECK(d.pause == 437500us);  // the others: the backoff (they may fit the 500 left)
    // this one: until 700 more have come back, at the rate the bucket refills (29,500 in 59 s)
    CHECK(d.delay == 1400ms);
    CHECK(d.from_server);
  }
  SECTION("without a limit, the whole reset") {
    RateLimitInfo info;
    info.tokens.remaining = 500;
    info.tokens.reset_after = 6s;
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.pause == 437500us);
    CHECK(d.delay == 6s);
  }
  SECTION("Anthropic's input and output buckets each against their own part") {
    RateLimitInfo info;
    info.input_tokens = {.limit = 40'000, .remaining = 2'000, .reset_after = 60s};  // fits 1,000
    info.output_tokens = {.limit = 8'000, .remaining = 100, .reset_after = 60s};    // not 200
    // Its tokens headers: the most restrictive bucket (the output one), not input + output;
    // read as a 1,200-token need against 100 left of 8,000 they would say 8.3 s.
    info.tokens = {.limit = 8'000, .remaining = 100, .reset_after = 60s};
    RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.delay == 759'493'671ns);  // 60 s x 100 / 7,900, rounded to the nanosecond
    CHECK(d.pause == 437500us);
    info.output_tokens.reset_after = 8s;  // 101 ms: shorter than the backoff, which stands
    d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.delay == 437500us);
    CHECK(d.pause == 437500us);
  }
  SECTION("enough left, or an exhausted bucket: as before") {
    RateLimitInfo info;
    info.tokens = {.limit = 30'000, .remaining = 1'200, .reset_after = 59s};  // exactly fits
    RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.delay == 437500us);
    CHECK(d.pause == 437500us);
    CHECK_FALSE(d.from_server);
    info.tokens.remaining = 0;  // exhausted: everyone waits for the reset
    d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.delay == 59s);
    CHECK(d.pause == 59s);
  }
  SECTION("an exhausted bucket and a short one: everyone its reset, this one the longer wait") {
    RateLimitInfo info;
    info.requests = {.remaining = 0, .reset_after = 2s};
    info.tokens = {.remaining = 500, .reset_after = 20s};
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.pause == 2s);
    CHECK(d.delay == 20s);
  }
  SECTION("retry-after is the server's word: no bucket arithmetic") {
    RateLimitInfo info = with_retry_after(3s);
    info.tokens = {.remaining = 500, .reset_after = 20s};
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK(d.delay == 3s);
    CHECK(d.pause == 3s);
  }
  SECTION("a wait beyond max_retry_after fails this request; the others hold only the backoff") {
    RateLimitInfo info;
    info.tokens = {.remaining = 500, .reset_after = 90s};
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, need);
    CHECK_FALSE(d.retry);
    CHECK(d.pause == 437500us);
  }
  SECTION("not a 429: no bucket arithmetic") {
    RateLimitInfo info;
    info.tokens = {.remaining = 500, .reset_after = 20s};
    const RetryDecision d = decide_retry(policy, 1, err_for(500), 500, info, 0.5, need);
    CHECK(d.delay == 250ms);  // full jitter: it holds this request only
    CHECK(d.pause == 0ns);  // no pause_all
  }
  SECTION("a need above the stated limit never fits: no wait for it, the backoff") {
    RateLimitInfo info;
    info.tokens = {.limit = 30'000, .remaining = 500, .reset_after = 59s};
    const laneq::RateCost big{.input_tokens = 40'000, .output_tokens = 200};
    const RetryDecision d = decide_retry(policy, 1, err_for(429), 429, info, 0.5, big);
    CHECK(d.delay == 437500us);
    CHECK_FALSE(d.from_server);
  }
  SECTION("a need of absurd size does not overflow") {
    RateLimitInfo info;
    info.tokens = {.remaining = 500, .reset_after = 20s};  // no limit: the whole reset
    const laneq::RateCost huge{.input_tokens = std::numeric_limits<std::int64_t>::max(),
                               .output_tokens = std::numeric_limits<std::int64_t>::max()};
    CHECK(decide_retry(policy, 1, err_for(429), 429, info, 0.5, huge).delay == 20s);
    info.tokens.limit = std::numeric_limits<std::int64_t>::max();
    CHECK(decide_retry(policy, 1, err_for(429), 429, info, 0.5, huge).delay > 0ns);
  }
}

TEST_CASE("pause_all for 429, 529 and overloaded, not for other server errors", "[retry]") {
  CHECK(decide_retry(policy, 1, err_for(429), 429, no_headers, 0.5).pause_all);
  CHECK(decide_retry(policy, 1, some_error, 429, no_headers, 0.5).pause_all);
  CHECK(decide_retry(policy, 1, err_for(529), 529, no_headers, 0.5).pause_all);
  CHECK(decide_retry(policy, 1, err(errc::overloaded), 503, no_headers, 0.5).pause_all);
  CHECK(decide_retry(policy, 1, err(errc::overloaded), 0, no_headers, 0.5).pause_all);
  CHECK(decide_retry(policy, 1, err(errc::rate_limited), 0, no_headers, 0.5).pause_all);

  CHECK_FALSE(decide_retry(policy, 1, err_for(500), 500, no_headers, 0.5).pause_all);
  CHECK_FALSE(decide_retry(policy, 1, err(errc::server_error), 502, no_headers, 0.5).pause_all);
  CHECK_FALSE(decide_retry(policy, 1, err(errc::network), 0, no_headers, 0.5).pause_all);
  CHECK_FALSE(decide_retry(policy, 1, err_for(408), 408, no_headers, 0.5).pause_all);
  CHECK_FALSE(decide_retry(policy, 1, err_for(400), 400, no_headers, 0.5).pause_all);

  // The pause is as long as the delay: the server's when it gave one.
  const RetryDecision d = decide_retry(policy, 1, err_for(529), 529, with_retry_after(4s), 0.5);
  CHECK(d.pause_all);
  CHECK(d.delay == 4s);
  CHECK(d.pause == 4s);
}
