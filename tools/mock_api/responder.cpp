#include "mock_api/responder.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "mock_api/chat_call.hpp"
#include "mock_api/dialect.hpp"
#include "mock_api/header_values.hpp"

namespace laneq::mock {

namespace {

using nlohmann::json;

constexpr std::string_view json_type = "application/json";

Plan json_reply(int status, std::string body) {
  Plan p;
  p.status = status;
  p.headers.emplace_back("content-type", json_type);
  p.body = std::move(body);
  return p;
}

// Token counts come from the request (max_tokens up to 2^63 - 1): a charge saturates rather
// than wrapping negative, which the buckets would skip as nothing to take. Both are >= 0.
std::int64_t add_tokens(std::int64_t a, std::int64_t b) noexcept {
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  return a > max - b ? max : a + b;
}

// A charge held as a double back to a count: 2^63 does not convert.
std::int64_t to_tokens(double v) noexcept {
  return v >= 0x1p63 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(v);
}

// The random injection: one draw against the configured rates, in a fixed order.
OutcomeKind draw(const MockConfig& c, double u, int& status) {
  const struct {
    double rate;
    OutcomeKind kind;
    int status;
  } table[] = {{c.error_rate_500, OutcomeKind::error, 500},
               {c.error_rate_503, OutcomeKind::error, 503},
               {c.error_rate_529, OutcomeKind::error, 529},
               {c.insufficient_quota_rate, OutcomeKind::insufficient_quota, 0},
               {c.too_large_rate, OutcomeKind::too_large, 0},
               {c.reset_rate, OutcomeKind::reset, 0},
               {c.malformed_rate, OutcomeKind::malformed, 0},
               {c.stall_rate, OutcomeKind::stall, 0},
               {c.stream_error_rate, OutcomeKind::stream_error, 0},
               {c.stream_cut_rate, OutcomeKind::stream_cut, 0}};
  double edge = 0;
  for (const auto& row : table) {
    edge += row.rate;
    if (u < edge) {
      status = row.status;
      return row.kind;
    }
  }
  return OutcomeKind::ok;
}

}  // namespace

Responder::Responder(MockConfig config)
    : cfg_((validate(config), std::move(config))), rng_(cfg_.seed), stats_(cfg_.stats_max_keys) {}

void Responder::set_config(MockConfig config) {
  validate(config);
  std::lock_guard lock(mu_);
  if (config.seed != cfg_.seed) rng_.seed(config.seed);
  stats_.set_max_keys(config.stats_max_keys);
  cfg_ = std::move(config);
  limits_.clear();
}

MockConfig Responder::config() const {
  std::lock_guard lock(mu_);
  return cfg_;
}

void Responder::script(std::vector<MockOutcome> outcomes) {
  for (const auto& o : outcomes) validate(o);  // all or none
  std::lock_guard lock(mu_);
  for (auto& o : outcomes) script_.push_back(std::move(o));
}

std::size_t Responder::scripted() const {
  std::lock_guard lock(mu_);
  return script_.size();
}

void Responder::reset() {
  {
    std::lock_guard lock(mu_);
    script_.clear();
    limits_.clear();
    rng_.seed(cfg_.seed);  // the same draws again: a reset run answers as the first did
  }
  stats_.reset();
}

Plan Responder::plan(const HttpRequest& request, SteadyTime now, SystemTime system_now) {
  const auto path = request.path();
  Plan p = path == "/stats" || path.substr(0, 9) == "/control/" ? control(request)
                                                                 : plan_api_call(request, now, system_now);
  p.close = p.close || !request.keep_alive();
  if (request.minor_version == 0 && !p.events.empty()) p.unframed = p.close = true;
  return p;
}

Plan Responder::control(const HttpRequest& request) {
  const auto path = request.path();
  const auto not_allowed = [&](const char* method) {
    return json_reply(405, dump_json({{"error", {{"message", std::string(path) + " takes " + method}}}}));
  };
  if (path == "/stats") {
    if (request.method != "GET") return not_allowed("GET");
    return json_reply(200, dump_json(stats_.to_json()));  // keys are request bytes
  }
  if (path == "/control/reset") {
    if (request.method != "POST") return not_allowed("POST");
    reset();
    return json_reply(200, R"({"reset":true})");
  }
  if (path == "/control/script") {
    if (request.method != "POST") return not_allowed("POST");
    const auto body = json::parse(request.body, nullptr, false);
    if (body.is_discarded())
      return json_reply(400, R"({"error":{"message":"the body must be JSON: an outcome or an array of outcomes"}})");
    try {
      auto outcomes = outcomes_from_json(body);
      const auto queued = outcomes.size();
      script(std::move(outcomes));
      return json_reply(200, dump_json({{"queued", queued}, {"pending", scripted()}}));
    } catch (const std::invalid_argument& e) {
      return json_reply(400, dump_json({{"error", {{"message", e.what()}}}}));
    }
  }
  return json_reply(404, dump_json({{"error", {{"message", "unknown control endpoint"}}}}));
}

Plan Responder::plan_api_call(const HttpRequest& request, SteadyTime now, SystemTime system_now) {
  const auto path = request.path();
  CallInfo info;
  info.path = path;
  info.priority = request.header("x-priority").value_or("");
  info.client = request.header("x-client").value_or("");
  info.request_id = request.header("x-request-id").value_or("");
  info.laneq_id = request.header("x-laneq-id").value_or("");

  const Dialect* d = path == "/v1/chat/completions" ? &openai_dialect()
                     : path == "/v1/messages"       ? &anthropic_dialect()
                                                    : nullptr;
  // Every early answer below is counted as a call too.
  const auto early = [&](ErrorReply e) {
    stats_.call_started(info, now);
    Plan p = json_reply(e.status, std::move(e.body));
    p.api_call = true;
    return p;
  };
  if (!d) {
    std::string m = "Unknown request URL: ";
    m += request.method;
    m += ' ';
    m += path;
    return early(openai_dialect().error({.kind = ErrorKind::not_found, .message = m}));
  }
  if (request.method != "POST") {
    std::string m = "Unknown request URL: ";
    m += request.method;
    m += ' ';
    m += path;
    m += ". Only POST is supported.";
    return early(d->error({.kind = ErrorKind::not_found, .message = m}));
  }
  const auto key = d->api_key(request);
  if (!key) return early(d->auth_error(request));
  info.api_key = *key;

  ChatCall call;
  {
    const auto body = json::parse(request.body, nullptr, false);
    std::string problem;
    if (body.is_discarded()) {
      problem = "We could not parse the JSON body of your request. (HINT: This likely means you "
                "aren't using your HTTP library correctly.)";
    } else {
      try {
        call = d->parse(body);
      } catch (const BadRequest& e) {
        problem = e.what();
      }
    }
    if (!problem.empty()) {
      if (body.is_object())
        if (const auto m = body.find("model"); m != body.end() && m->is_string())
          info.model = m->get_ref<const std::string&>();
      stats_.call_started(info, now);
      Plan p = json_reply(400, d->error({.kind = ErrorKind::bad_request, .message = problem}).body);
      p.headers.emplace_back(d->request_id_header(), "req_mock_bad");
      p.api_call = true;
      p.api_key = *key;
      return p;
    }
  }
  info.model = call.model;
  stats_.call_started(info, now);

  // Decide under the lock: script, buckets, random draw, latency.
  const std::int64_t output_reserved = call.max_tokens.value_or(0);
  std::optional<MockOutcome> forced;
  std::optional<Rejection> rejection;
  OutcomeKind kind = OutcomeKind::ok;
  int drawn_status = 500;
  Charge charge;
  bool admitted = false;  // charged to the buckets
  std::chrono::nanoseconds latency{0};
  LimitsSnapshot limits;
  MockConfig cfg;
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    cfg = cfg_;
    id = next_id_++;
    const auto out = output_reserved > 0 ? output_reserved : cfg.completion_tokens;
    charge = {.requests = 1,
              .tokens = static_cast<double>(add_tokens(call.prompt_tokens, out)),
              .input_tokens = d->split_token_limits() ? static_cast<double>(call.prompt_tokens) : 0.0,
              .output_tokens = d->split_token_limits() ? static_cast<double>(out) : 0.0};
    auto& lim = limits_.try_emplace(*key, cfg, now).first->second;
    if (!script_.empty()) {
      forced = std::move(script_.front());
      script_.pop_front();
      kind = forced->kind;
      drawn_status = forced->status;  // forced outcomes bypass the buckets
    } else if ((rejection = lim.take(charge, now))) {
      kind = OutcomeKind::rate_limit;
    } else {
      admitted = true;
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
      kind = draw(cfg, u, drawn_status);
      // Stream faults are only injected at random into streams.
      if (!call.stream && (kind == OutcomeKind::stream_error || kind == OutcomeKind::stream_cut))
        kind = OutcomeKind::ok;
    }
    if (forced && forced->latency) {
      latency = *forced->latency;
    } else if (!rejection) {
      latency = cfg.latency;
      if (cfg.jitter.count() > 0)
        latency += std::chrono::nanoseconds(std::uniform_int_distribution<std::int64_t>(
            0, std::chrono::nanoseconds(cfg.jitter).count())(rng_));
    }
    limits = lim.snapshot(now);
  }

  Answer answer = make_answer(call, cfg.completion_tokens,
                              std::string(d->id_prefix()) + std::to_string(id),
                              std::chrono::duration_cast<std::chrono::seconds>(
                                  system_now.time_since_epoch()).count());
  Plan p;
  p.api_call = true;
  p.api_key = *key;
  p.latency = latency;
  p.chunk_delay = cfg.stream_chunk_delay;

  const auto error = [&](const ErrorSpec& spec) {
    auto e = d->error(spec);
    p.status = e.status;
    p.body = std::move(e.body);
  };
  const auto reply = [&] {
    if (call.stream) {
      p.events = d->stream(answer, call.include_usage).events;
    } else {
      p.body = d->reply_body(answer);
    }
    p.success = true;
  };
  // retry-after-ms and retry-after: the bucket's wait (ms, s), unless the script says otherwise.
  const auto add_retry_after = [&](std::optional<std::chrono::nanoseconds> ms,
                                   std::optional<std::chrono::nanoseconds> s) {
    if (forced && forced->retry_after_ms) ms = s = *forced->retry_after_ms;
    if (forced && forced->retry_after) s = *forced->retry_after;
    if (ms) p.headers.emplace_back("retry-after-ms", format_millis_ceil(*ms));
    if (s) p.headers.emplace_back("retry-after", format_seconds_ceil(*s));
  };
  const std::string message = forced ? forced->message : std::string();
  bool rate_headers = true;
  switch (kind) {
    case OutcomeKind::ok:
      reply();
      break;
    case OutcomeKind::error:
      error({.kind = ErrorKind::status, .status = drawn_status, .message = message});
      break;
    case OutcomeKind::rate_limit: {
      ErrorSpec spec{.kind = ErrorKind::rate_limit, .message = message, .model = call.model};
      if (rejection) {
        spec.rate_limit_type = rejection->bucket;
        spec.limit = rejection->limit;
        spec.requested = to_tokens(rejection->requested);
        if (!rejection->retry_after) spec.kind = d->split_token_limits() ? ErrorKind::rate_limit : ErrorKind::too_large;
      } else {
        spec.rate_limit_type = forced->rate_limit_type;
        const auto& b = forced->rate_limit_type == "tokens" ? limits.tokens : limits.requests;
        spec.limit = b.limited ? b.limit : unlimited_header_value;
        spec.requested = forced->rate_limit_type == "tokens" ? to_tokens(charge.tokens) : 1;
      }
      error(spec);
      // A script's `headers: false` drops the retry-after headers too.
      rate_headers = cfg.rate_limit_headers_on_429 && (!forced || forced->rate_limit_headers);
      if (rate_headers) {
        std::optional<std::chrono::nanoseconds> ms, s;
        if (rejection && rejection->retry_after) ms = s = *rejection->retry_after;
        add_retry_after(ms, s);
      }
      break;
    }
    case OutcomeKind::insufficient_quota:
      error({.kind = ErrorKind::insufficient_quota, .message = message});
      break;
    case OutcomeKind::too_large:
      error({.kind = ErrorKind::too_large, .message = message, .model = call.model,
             .limit = limits.tokens.limited ? limits.tokens.limit : unlimited_header_value,
             .requested = add_tokens(call.prompt_tokens, output_reserved)});
      break;
    case OutcomeKind::reset:
      p.kind = Plan::Kind::reset;
      break;
    case OutcomeKind::malformed:
      if (call.stream) {
        auto s = d->stream(answer, call.include_usage);
        p.events = {s.events.front(), d->malformed_event(answer)};
      } else {
        p.body = truncated_json(d->reply_body(answer));
      }
      break;
    case OutcomeKind::stall:
    case OutcomeKind::stream_cut:
      reply();
      p.success = false;
      p.kind = kind == OutcomeKind::stall ? Plan::Kind::stall : Plan::Kind::cut;
      if (call.stream) {
        const auto s = d->stream(answer, call.include_usage);
        p.partial_events = kind == OutcomeKind::stall ? s.error_at : s.final_at;
      }
      break;
    case OutcomeKind::stream_error:
      if (call.stream) {
        auto s = d->stream(answer, call.include_usage);
        s.events.resize(s.error_at);
        s.events.push_back(d->error_event(message));
        p.events = std::move(s.events);
      } else {
        error({.kind = ErrorKind::status, .status = 500, .message = message});
      }
      break;
  }
  if (forced && !forced->rate_limit_headers) rate_headers = false;
  // Every 429 (a quota, a too-large request, a scripted status too), not only a bucket's.
  if (p.status == 429 && !cfg.rate_limit_headers_on_429) rate_headers = false;
  // A scripted retry-after on another error (a 503, a 529): servers send it there too.
  if (forced && kind != OutcomeKind::rate_limit && rate_headers && p.status >= 400)
    add_retry_after(std::nullopt, std::nullopt);

  p.headers.emplace_back("content-type", p.events.empty() ? "application/json" : "text/event-stream");
  if (!p.events.empty()) p.headers.emplace_back("cache-control", "no-cache");
  p.headers.emplace_back(d->request_id_header(), "req_mock_" + std::to_string(id));
  if (rate_headers) d->add_rate_limit_headers(p.headers, limits, system_now, cfg.round_anthropic_tokens);
  if (p.status >= 400) {
    const auto should_retry = forced && forced->should_retry ? forced->should_retry : cfg.should_retry;
    if (should_retry) p.headers.emplace_back("x-should-retry", *should_retry ? "true" : "false");
  }
  if (kind != OutcomeKind::ok && kind != OutcomeKind::rate_limit) stats_.injected(to_string(kind));

  // Admitted calls give back the output tokens they did not use, once they end.
  if (cfg.refund_unused_tokens && admitted) {
    const auto used = p.success ? answer.completion_tokens : 0;
    const auto reserved = charge.tokens - static_cast<double>(call.prompt_tokens);
    p.refund = {.requests = 0,
                .tokens = std::max(0.0, reserved - static_cast<double>(used)),
                .output_tokens = charge.output_tokens > 0 ? std::max(0.0, charge.output_tokens - static_cast<double>(used)) : 0.0};
  }
  p.prompt_tokens = answer.prompt_tokens;
  p.completion_tokens = answer.completion_tokens;
  return p;
}

void Responder::finish(const Plan& plan, bool delivered, SteadyTime now) {
  if (!plan.api_call) return;
  if (plan.refund.tokens > 0 || plan.refund.output_tokens > 0) {
    std::lock_guard lock(mu_);
    if (const auto it = limits_.find(plan.api_key); it != limits_.end())
      it->second.give_back(plan.refund, now);
  }
  if (delivered && plan.success) stats_.usage(plan.prompt_tokens, plan.completion_tokens);
  stats_.call_finished();
}

}  // namespace laneq::mock
