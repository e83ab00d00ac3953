#pragma once
// laneq's error codes: one std::error_category, enum registered with std::is_error_code_enum so
// `ec == laneq::errc::timeout` works. Messages say what happened and what to do.
#include <string>
#include <system_error>

namespace laneq {

enum class errc : int {
  queue_full = 1,         // max_pending reached and the lane rejects instead of waiting
  client_queue_full,      // the client's max_pending_per_client reached
  timeout,                // the deadline (queue wait + call) passed
  cancelled,              // the caller cancelled (cancellation slot)
  shutting_down,          // shutdown() stopped admission, or drain=false dropped it
  unknown_lane,           // SubmitOptions::priority names no configured lane
  invalid_config,         // a config field is out of range (the exception text names it)
  not_started,            // expired in a queue whose start() was never called
  exceeds_rate_limit,     // the request's cost exceeds a rate budget's whole limit: it could never run
  // provider outcomes a caller can branch on
  rate_limited,           // HTTP 429 (retryable)
  overloaded,             // HTTP 529 / 503 overloaded (retryable)
  auth,                   // 401 / 403: bad or missing API key
  bad_request,            // 400 / 404 / 422: the request itself is wrong
  request_too_large,      // 413 or "request too large" (or a prompt estimate above 2^31 - 1,
                          // refused at submit): can never succeed as sent
  quota_exceeded,         // 402, insufficient_quota: billing, not rate
  server_error,           // 5xx
  network,                // connect / reset / TLS failure
  malformed_response,     // the provider answered something unparseable
  internal,               // a bug in laneq or an exception thrown by a provider
  // durable journal (store/journal.hpp)
  journal,                // the journal could not be opened, read or written (the text says why)
  duplicate_id,           // a journal already holds a request with this id
  no_journal,             // a durable submit or result lookup on a queue without a journal
  interrupted_too_often,  // recovered: its call was in flight when max_interrupted_runs runs ended
};

const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

// A short stable name for logs and files: "timeout", "rate_limited", ... for laneq codes,
// "<category>:<value>" (e.g. "system:104") for any other.
std::string error_name(std::error_code ec);

}  // namespace laneq

template <>
struct std::is_error_code_enum<laneq::errc> : std::true_type {};
