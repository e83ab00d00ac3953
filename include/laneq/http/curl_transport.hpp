#pragma once
// CurlTransport: libcurl's multi-socket API driven by the user's io_context. curl says which
// sockets to watch (socket callback -> async_wait on readiness) and when to wake it (timer
// callback -> one steady_timer); every curl call happens on one strand. Many transfers at
// once, connections reused from curl's pool, HTTP/2 multiplexing when the server offers it
// (ALPN; HTTP/1.1 keep-alive otherwise), TLS verification on, proxies from the usual
// environment variables (https_proxy, no_proxy, ...) unless configured.
//
// Threads: none of its own. Name resolution uses curl's asynchronous resolver (Debian's
// libcurl: a short-lived resolver thread per lookup, never a blocking call on the loop; a
// transfer cancelled mid-lookup leaves that thread to finish alone instead of joining it).
// Lifetime: destroy after the io_context stopped running; pending transfers then complete with
// asio::error::operation_aborted when it runs again (or are destroyed with it). A body larger
// than max_response_bytes (streamed or not), or header blocks larger than 256 KiB in all (1xx
// ones included), completes with errc::malformed_response. A method that is not an HTTP token,
// or a request header whose name is not one or whose value holds a control character (CR, LF,
// NUL), completes with errc::bad_request, unsent; a header
// with an empty value is sent empty (not dropped, as a bare "Name:" line tells curl to).
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "laneq/transport.hpp"

namespace laneq {

struct CurlTransportConfig {
  std::string ca_file{};                                   // "" = the system's CA bundle
  bool verify_tls = true;                                  // false only for local experiments
  std::string proxy{};  // "" = from the environment; set: every host (no_proxy not read)
  std::chrono::milliseconds connect_timeout{10'000};        // >= 0; 0 = curl's (300 s)
  std::chrono::milliseconds timeout{0};                    // per exchange; 0 = none (deadlines
                                                           // cancel instead)
  bool http2 = true;                                       // offer h2 over TLS (ALPN)
  std::size_t max_connections_per_host = 0;                // 0 = unlimited
  std::size_t max_total_connections = 0;                   // 0 = unlimited
  std::string user_agent = "laneq/0.1";
  // A body larger than this (a stream's too, counted as it is handed on) aborts the transfer
  // with malformed_response, so a broken or hostile server cannot grow memory without bound;
  // 0 = unlimited.
  std::size_t max_response_bytes = std::size_t{64} << 20;
};

namespace detail {
class curl_engine;
}

class CurlTransport final : public Transport {
 public:
  // Throws std::system_error(errc::invalid_config) for a negative timeout, a ca_file that
  // cannot be read or is no file of certificates (a directory, an empty file), or when
  // libcurl cannot be set up.
  explicit CurlTransport(executor_type ex, CurlTransportConfig config = {});
  ~CurlTransport() override;
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  void async_request(HttpRequest request, executor_type ex, asio::cancellation_slot cancel,
                     HttpCompletion done) override;
  executor_type get_executor() const override { return executor_; }

  // Observations (thread-safe).
  std::size_t in_flight() const noexcept;
  std::size_t connections_opened() const noexcept;  // sockets curl opened so far

 private:
  executor_type executor_;
  std::shared_ptr<detail::curl_engine> engine_;
};

}  // namespace laneq
