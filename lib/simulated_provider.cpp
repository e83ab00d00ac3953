#include "laneq/simulated_provider.hpp"
#include "laneq/detail/post.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <system_error>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

namespace laneq {

namespace {

Response make_response(std::error_code ec, int status, Headers headers, Usage usage) {
  if (!ec)  // built in place: assigning to a Response's strings costs more than constructing
    return Response{.status = status,
                    .text = "simulated",
                    .usage = usage,
                    .finish_reason = "stop",
                    .headers = std::move(headers)};
  Response r;
  r.status = status;
  r.headers = std::move(headers);
  r.error_type = "simulated_error";
  r.error_message = ec.message();  // the category's own text; (no concatenation: GCC 12 -O3
                                   // reports a false -Wrestrict for string + string)
  r.error_message.insert(0, "injected failure: ");
  return r;
}

// What a server answers with each outcome (SimulatedOutcome::status = 0).
int usual_status(std::error_code ec) {
  if (!ec || ec == errc::malformed_response) return 200;
  if (ec.category() != error_category()) return 0;
  switch (static_cast<errc>(ec.value())) {
    case errc::rate_limited:
    case errc::quota_exceeded: return 429;
    case errc::overloaded: return 529;
    case errc::server_error: return 500;
    case errc::auth: return 401;
    case errc::bad_request: return 400;
    case errc::request_too_large: return 413;
    default: return 0;  // no HTTP exchange: network, timeout, ...
  }
}

void validate(const SimulatedProviderConfig& c) {
  const auto bad = [](const std::string& what) {
    throw std::system_error(make_error_code(errc::invalid_config),
                            "SimulatedProviderConfig::" + what);
  };
  // A century each: "never answers" in a test, and latency + jitter cannot overflow.
  constexpr std::chrono::nanoseconds most = std::chrono::hours(24 * 36'525);
  if (c.latency.count() < 0 || c.latency > most) bad("latency must be in 0 .. 100 years");
  if (c.jitter.count() < 0 || c.jitter > most) bad("jitter must be in 0 .. 100 years");
  if (c.output_tokens < 0) bad("output_tokens must be >= 0");
  if (!(c.failure_rate >= 0.0 && c.failure_rate <= 1.0))  // NaN too
    bad("failure_rate must be in 0..1 (got " + std::to_string(c.failure_rate) + ")");
  if (c.failure_rate > 0 && !c.failure) bad("failure must be an error when failure_rate > 0");
  if (c.failure_status != 0 && (c.failure_status < 100 || c.failure_status > 599))
    bad("failure_status must be 0 or an HTTP status 100..599 (got " +
        std::to_string(c.failure_status) + ")");
}

}  // namespace

SimulatedProvider::SimulatedProvider(SimulatedProviderConfig config)
    : cfg_((validate(config), std::move(config))), rng_(cfg_.seed) {}

void SimulatedProvider::script(SimulatedOutcome outcome) {
  std::lock_guard lock(mu_);
  script_.push_back(std::move(outcome));
  scripted_.fetch_add(1, std::memory_order_release);
}

SimulatedProvider::plan SimulatedProvider::next_plan(const Request& request) {
  // Nothing random or scripted to decide: no lock (the B1 no-op path).
  if (!cfg_.latency_fn && !cfg_.usage_fn && cfg_.jitter.count() <= 0 && cfg_.failure_rate <= 0 &&
      scripted_.load(std::memory_order_acquire) == 0)
    return {cfg_.latency, {.status = 200}};
  std::lock_guard lock(mu_);
  plan p{cfg_.latency, {}};
  // The caller's functions run inside async_call, which is noexcept: one that throws fails
  // this call with `internal` instead of ending the process.
  try {
    if (cfg_.latency_fn) {
      p.latency = cfg_.latency_fn(request, rng_);
    } else if (cfg_.jitter.count() > 0) {
      p.latency += std::chrono::nanoseconds(
          std::uniform_int_distribution<std::int64_t>(0, cfg_.jitter.count() - 1)(rng_));
    }
    if (cfg_.usage_fn) p.usage = cfg_.usage_fn(request, rng_);
  } catch (const std::exception& e) {
    p.thrown = std::string("SimulatedProviderConfig's latency_fn or usage_fn threw: ") + e.what();
    return p;
  } catch (...) {
    p.thrown = "SimulatedProviderConfig's latency_fn or usage_fn threw";
    return p;
  }
  if (!script_.empty()) {
    p.outcome = std::move(script_.front());
    script_.pop_front();
    scripted_.fetch_sub(1, std::memory_order_release);
    if (p.outcome.latency) p.latency = *p.outcome.latency;
  } else if (cfg_.failure_rate > 0 &&
             std::uniform_real_distribution<double>(0, 1)(rng_) < cfg_.failure_rate) {
    p.outcome.error = cfg_.failure;
    p.outcome.status = cfg_.failure_status;
  }
  if (p.outcome.status == 0) p.outcome.status = usual_status(p.outcome.error);
  return p;
}

void SimulatedProvider::async_call(const Request& request, const CallContext& ctx,
                                   CallCompletion done) noexcept {
  const auto called = calls_.fetch_add(1, std::memory_order_relaxed) + 1;
  const auto now_in_flight =
      static_cast<std::int64_t>(called - answered_.load(std::memory_order_acquire));
  auto seen = max_in_flight_.load(std::memory_order_relaxed);
  while (now_in_flight > seen && !max_in_flight_.compare_exchange_weak(seen, now_in_flight)) {}

  plan p = next_plan(request);
  if (!p.thrown.empty()) {  // no HTTP exchange (status 0), answered on the next loop turn
    detail::post(ctx.executor, [this, done = std::move(done), msg = std::move(p.thrown)]() mutable {
      answered_.fetch_add(1, std::memory_order_release);
      Response r;
      r.error_message = std::move(msg);
      done(errc::internal, std::move(r));
    });
    return;
  }
  // Sizes now; the Response itself is built when the call completes, so the posted handler
  // stays small.
  std::size_t chars = 0;
  for (const auto& m : request.messages) chars += m.content.size();
  std::int64_t input = static_cast<std::int64_t>(chars / 4 + 1);
  std::int64_t output = request.max_tokens > 0
                            ? std::min<std::int64_t>(cfg_.output_tokens, request.max_tokens)
                            : cfg_.output_tokens;
  std::int64_t exempt = 0;
  if (p.usage) {
    input = p.usage->input_tokens;
    output = p.usage->output_tokens;
    exempt = p.usage->rate_exempt_input_tokens;
  }

  if (p.latency.count() <= 0 && p.outcome.headers.empty()) {
    detail::post(ctx.executor, [this, done = std::move(done), ec = p.outcome.error,
                                status = p.outcome.status,
                                usage = Usage{input, output, exempt}]() mutable {
      answered_.fetch_add(1, std::memory_order_release);
      done(ec, make_response(ec, status, {}, usage));
    });
    return;
  }
  const std::error_code ec = p.outcome.error;
  Response r = make_response(ec, p.outcome.status, std::move(p.outcome.headers),
                             Usage{input, output, exempt});

  struct call_state {
    asio::steady_timer timer;
    asio::cancellation_slot slot;
    CallCompletion done;
    std::error_code ec;
    Response response;
  };
  auto st = std::make_shared<call_state>(
      call_state{asio::steady_timer(ctx.executor), ctx.cancel, std::move(done), ec, std::move(r)});
  st->timer.expires_after(p.latency);
  // The queue emits on ctx.executor, the timer's executor: cancel() never races the wait.
  if (st->slot.is_connected())
    st->slot.assign([st](asio::cancellation_type) { st->timer.cancel(); });
  st->timer.async_wait([this, st](std::error_code wait_ec) {
    if (st->slot.is_connected()) st->slot.clear();
    answered_.fetch_add(1, std::memory_order_release);
    if (wait_ec) {
      aborted_.fetch_add(1, std::memory_order_relaxed);
      st->done(asio::error::operation_aborted, Response{});
    } else {
      st->done(st->ec, std::move(st->response));
    }
  });
}

}  // namespace laneq
