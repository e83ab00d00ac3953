#pragma once
// Transport: one HTTP exchange, asynchronously. Providers build an HttpRequest and parse the
// HttpResponse; the transport (CurlTransport in production) moves the bytes without ever
// blocking the io_context.
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/dispatch.hpp>

#include "laneq/detail/unique_function.hpp"
#include "laneq/request.hpp"

namespace laneq {

struct HttpRequest {
  std::string method = "POST";
  std::string url{};
  Headers headers{};
  std::string body{};
  // Streaming: called with each piece of a 2xx response body as it arrives (on the transport's
  // strand; must not block), which is then not accumulated in HttpResponse::body; any other
  // status's body is (an error's JSON). It may
  // throw to stop reading (the providers do, when the stream broke its limits or the caller's
  // on_delta threw): a transport then aborts the exchange and completes with an error
  // (CurlTransport: errc::network), never letting the exception escape.
  std::function<void(std::string_view)> on_body{};
  std::chrono::milliseconds timeout{0};  // whole exchange; 0 = the transport's default
};

struct HttpResponse {
  int status = 0;               // 0: no HTTP answer (see error)
  Headers headers{};            // of the final response (not of 1xx / redirects)
  std::string body{};           // empty when a 2xx body was streamed through on_body
  long http_version = 0;        // 10, 11, 20, 30 (HTTP/1.0 ... HTTP/3)
  std::string error{};          // transport failure, a person's words (never an API key)
};

// Invoked exactly once, on the executor passed to async_request. Errors: errc::network
// (connect, reset, TLS, DNS, timeout...) with HttpResponse::error saying which;
// errc::malformed_response for a body over CurlTransportConfig::max_response_bytes;
// asio::error::operation_aborted when cancelled. An HTTP error status is not an error here.
using HttpCompletion = detail::unique_function<void(std::error_code, HttpResponse)>;

class Transport {
 public:
  using executor_type = asio::any_io_executor;
  virtual ~Transport() = default;

  // Starts one exchange. `ex` is the caller's executor: `done` runs there (the transport keeps
  // it busy meanwhile), and `cancel`, when connected, must be emitted there (as Asio requires of
  // every operation); emitting it aborts the transfer.
  virtual void async_request(HttpRequest request, executor_type ex, asio::cancellation_slot cancel,
                             HttpCompletion done) = 0;

  virtual executor_type get_executor() const = 0;
};

// The same with any completion token (use_awaitable, a callback, use_future, deferred...):
// signature void(std::error_code, HttpResponse); cancellation through the token's slot.
template <class CompletionToken>
auto async_http(Transport& transport, HttpRequest request, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, HttpResponse)>(
      [&transport](auto handler, HttpRequest r) {
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto assoc = asio::get_associated_executor(handler, transport.get_executor());
        if constexpr (std::is_convertible_v<decltype(assoc), Transport::executor_type>) {
          transport.async_request(std::move(r), std::move(assoc), slot,
                                  HttpCompletion(std::move(handler)));
        } else {
          // e.g. use_future's executor: complete on the transport's, then hand over.
          transport.async_request(
              std::move(r), transport.get_executor(), slot,
              HttpCompletion([h = std::move(handler)](std::error_code ec, HttpResponse resp) mutable {
                auto ex = asio::get_associated_executor(h);
                asio::dispatch(ex, [h = std::move(h), ec, resp = std::move(resp)]() mutable {
                  std::move(h)(ec, std::move(resp));
                });
              }));
        }
      },
      token, std::move(request));
}

}  // namespace laneq
