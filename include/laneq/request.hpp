#pragma once
// What a caller submits (Request + SubmitOptions) and what it gets back (Response).
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "laneq/client_id.hpp"
#include "laneq/finish.hpp"
#include "laneq/priority.hpp"

namespace laneq {

struct Message {
  std::string role{};   // "system", "user", "assistant", ...
  std::string content{};
};

// A provider-neutral chat request. Providers turn it into their wire format.
struct Request {
  // Your id for the request (e.g. a batch line's custom_id); sent as `x-laneq-id` so a server
  // or proxy can tell an at-least-once redelivery (when it is at most 256 printable ASCII bytes;
  // otherwise not sent). Durable requests are journaled under it (a
  // unique one is made when empty).
  std::string id{};
  std::string model{};
  std::vector<Message> messages{};
  std::int32_t max_tokens = 0;          // 0 = provider default
  bool stream = false;
  nlohmann::json extra = nullptr;       // extra JSON fields passed through to the provider body
                                        // (an object; no NaN or infinity: bad_request)
  // stream = true: called with each text delta as it arrives (on the transport's strand: keep
  // it short, never block). The Response still carries the whole text at the end. A server that
  // ignored `stream` and sent one whole body: called once with its text, when the call ends
  // (on the call's executor: the queue's strand).
  // A stream that already gave text here is not retried (you would see it twice); an exception
  // from it ends the request with errc::internal ("Request::on_delta threw: ...").
  std::function<void(std::string_view)> on_delta{};
};

// How a request is scheduled. Designated initializers: {.priority = Priority::critical, ...}.
// Trivially copyable on purpose (see client_id.hpp).
struct SubmitOptions {
  Priority priority = Priority::normal;              // names a lane of QueueConfig::lanes
  ClientId client{};                                 // tenant for fair scheduling ("" = default)
  // Queue wait + call; overrides the lane's. milliseconds::max() (or 100 years or more): none;
  // 0 or less: bad_request at submit.
  std::optional<std::chrono::milliseconds> timeout{};
  std::uint32_t cost = 1;                            // fairness cost (DRR), e.g. tokens; ≥ 1
  // Journaled before it is queued (needs QueueConfig::journal): survives a crash and runs
  // again after a restart (at-least-once). See RequestQueue::async_enqueue.
  bool durable = false;
};

static_assert(std::is_trivially_copyable_v<SubmitOptions>);

struct Usage {
  std::int64_t input_tokens = 0;   // all prompt tokens, cached ones included
  std::int64_t output_tokens = 0;
  // Of input_tokens, those the provider's rate limits do not count: Anthropic's prompt-cache
  // reads (its rate-limits page; a few older models, marked there, do count them). The queue's
  // limiter is charged input_tokens minus these.
  std::int64_t rate_exempt_input_tokens = 0;
  std::int64_t total() const noexcept {  // saturates: a server's absurd counts never overflow
    std::int64_t sum;
    if (__builtin_add_overflow(input_tokens, output_tokens, &sum))
      return input_tokens > 0 ? std::numeric_limits<std::int64_t>::max()
                              : std::numeric_limits<std::int64_t>::min();
    return sum;
  }
};

// Header names as received; look-ups through Response::header() ignore case.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct Response {
  int status = 0;                  // HTTP status (0 when no HTTP exchange happened)
  std::string text{};              // first choice / concatenated text blocks
  Usage usage{};
  std::string finish_reason{};     // the provider's word ("stop", "end_turn", ...); see finish()
  Headers headers{};
  nlohmann::json raw = nullptr;    // the provider's JSON body, as parsed (a stream: the body
                                   // its events add up to, tool calls and refusals included)
  // On failure: the provider's error type and message when it sent them (status != 0), else
  // what laneq or the transport found (a refused option, a connection error, ...).
  std::string error_type{};
  std::string error_message{};
  // Filled by the queue.
  std::uint32_t attempts = 0;
  // service_time: the last provider call's (0 if none was made); queue_wait: the rest of the
  // time from submit to the outcome (queued, at the rate limiter, earlier calls, back-offs).
  // Both 0 for a request that never left its queue.
  std::chrono::nanoseconds queue_wait{0};
  std::chrono::nanoseconds service_time{0};

  // finish_reason in one vocabulary for every provider (finish.hpp).
  Finish finish() const noexcept { return finish_of(finish_reason); }
  // Case-insensitive header look-up; nullptr when absent.
  const std::string* header(std::string_view name) const noexcept;
};

}  // namespace laneq
