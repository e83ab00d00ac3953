#pragma once
// The part every HTTP provider shares: build the HttpRequest, send it through the Transport,
// feed a streamed body through the SSE parser into the wire format's accumulator, and turn the
// HttpResponse into a Response + laneq error. A provider keeps only its endpoint, headers and
// body builder. Internal to lib/.
#include <algorithm>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <asio/error.hpp>

#include "laneq/error.hpp"
#include "laneq/provider.hpp"
#include "laneq/sse.hpp"
#include "laneq/transport.hpp"
#include "../delta_failure.hpp"

namespace laneq::detail {

// A wire format's parse_response.
using parse_fn = std::error_code (*)(int status, const Headers& headers, std::string_view body,
                                     Response& out) noexcept;

// Accumulator: the wire format's StreamAccumulator (constructed from Request::on_delta);
// Parse: its parse_response, for every answer that is not a streamed 2xx.
template <class Accumulator, parse_fn Parse>
void start_http_call(Transport& transport, HttpRequest http, const Request& request,
                     const CallContext& ctx, CallCompletion done) {
  // A server or proxy that ignores "stream" answers 2xx with one whole body (JSON, or an HTML
  // page), which no event stream begins with: it is kept and parsed as an answer, not fed to
  // the parser, whose empty result read as a stream cut short (a network error: retried,
  // each retry a billed completion).
  // (CurlTransportConfig::max_response_bytes' default; the transport bounds what it hands to
  // on_body by that setting, which a caller may raise or set to 0)
  static constexpr std::size_t max_whole_body = std::size_t{64} << 20;
  struct stream_state {
    enum class kind : unsigned char { unknown, events, whole } body = kind::unknown;
    std::string whole;  // the body of kind::whole, up to max_whole_body
    bool whole_too_large = false;
    std::optional<std::string> delta_threw;  // what Request::on_delta threw, which ended it
    SseParser parser;
    Accumulator acc;
  };
  std::shared_ptr<stream_state> stream;
  if (request.stream) {
    stream = std::make_shared<stream_state>(
        stream_state{{}, {}, false, {}, {}, Accumulator(request.on_delta)});
    http.headers.emplace_back("Accept", "text/event-stream");
    // On the transport's strand, one chunk at a time; the completion below runs after the last.
    http.on_body = [stream](std::string_view chunk) {
      // A parser that gave up reads nothing more: end the transfer instead of downloading on.
      if (stream->parser.failed()) throw std::length_error("the event stream broke its limits");
      using kind = typename stream_state::kind;
      while (stream->body == kind::unknown) {  // decided by the first byte that is not blank
        // (blank lines before the first event dispatch nothing, a BOM means nothing: dropped)
        const auto first = chunk.find_first_not_of(" \t\r\n");
        if (first == std::string_view::npos) return;
        chunk.remove_prefix(first);
        if (chunk.starts_with("\xEF\xBB\xBF")) {
          chunk.remove_prefix(3);
          continue;
        }
        const char c = chunk.front();
        stream->body = c == '{' || c == '[' || c == '<' ? kind::whole : kind::events;
      }
      if (stream->body == kind::whole) {
        if (stream->whole.size() + chunk.size() > max_whole_body) {
          stream->whole_too_large = true;
          throw std::length_error("a whole body in answer to a stream request is too large");
        }
        stream->whole += chunk;
        return;
      }
      try {
        stream->parser.feed(chunk, [&](const SseEvent& e) { stream->acc.on_event(e); });
      } catch (const std::bad_alloc&) {
        throw;
      } catch (...) {  // (else only the caller's on_delta throws here)
        stream->delta_threw = current_what();
        throw;
      }
    };
  }
  transport.async_request(
      std::move(http), ctx.executor, ctx.cancel,
      HttpCompletion([done = std::move(done), stream](std::error_code ec, HttpResponse hr) mutable {
        Response r;
        r.status = hr.status;
        if (ec) {  // no (complete) HTTP answer
          // Keep what streamed so far, for the curious. A stream that said all it had to say
          // (its end marker, or an error event) before the transfer failed (a connection closed
          // without the last chunk, an HTTP/2 reset) is that answer: read as a network error
          // it was retried (each retry a billed completion), and a quota error lost its code.
          const std::error_code streamed = stream ? stream->acc.finish(r) : std::error_code{};
          if (stream && ec != asio::error::operation_aborted && !stream->delta_threw &&
              !stream->parser.failed() && stream->body == stream_state::kind::events &&
              hr.status >= 200 && hr.status < 300 &&
              (stream->acc.done() || stream->acc.error())) {
            r.headers = std::move(hr.headers);
            return done(streamed, std::move(r));
          }
          if (r.error_type.empty()) {  // the stream's own error words win; else the transport's
            r.error_type = "transport";
            r.error_message = std::move(hr.error);
          }
          r.headers = std::move(hr.headers);
          r.status = hr.status;
          if (stream && stream->delta_threw && ec != asio::error::operation_aborted)
            return done(make_error_code(errc::internal), delta_threw(std::move(r), *stream->delta_threw));
          // A stream whose parser gave up (a line or event beyond its limit) is malformed, not
          // a network failure: retrying would fail the same way. So is a body over the limit.
          const bool malformed = ec == errc::malformed_response ||
                                 (stream && (stream->parser.failed() || stream->whole_too_large));
          // A request the transport refused unsent (an invalid header) fails the same way
          // each time: not a network error, which would be retried.
          done(ec == asio::error::operation_aborted || ec == errc::bad_request ? ec
               : malformed ? make_error_code(errc::malformed_response)
                           : make_error_code(errc::network),
               std::move(r));
          return;
        }
        const bool whole = stream && stream->body == stream_state::kind::whole;
        if (stream && hr.status >= 200 && hr.status < 300 && !whole) {
          r.headers = std::move(hr.headers);
          std::error_code e = stream->parser.failed() ? make_error_code(errc::malformed_response)
                                                      : stream->acc.finish(r);
          done(e, std::move(r));
          return;
        }
        // Parse only copies the headers into `r`: hand it none and move ours in (a response
        // carries a dozen or more; copying them was a good part of a call's own cost).
        std::error_code e = Parse(hr.status, Headers{}, whole ? stream->whole : hr.body, r);
        r.headers = std::move(hr.headers);
        if (whole && !e) {  // the caller's on_delta sees the text as one delta, as if streamed
          try {
            stream->acc.deliver_whole(r.text);
          } catch (...) {
            r = delta_threw(std::move(r), current_what());
            e = make_error_code(errc::internal);
          }
        }
        done(e, std::move(r));
      }));
}

// A call that fails before it starts (e.g. a body that cannot be built): reported through
// `done` on the caller's executor, never inline.
void fail_call(const CallContext& ctx, CallCompletion& done, std::error_code ec,
               std::string message);

// A provider's whole async_call: POST build_body() to `url` with `headers`. A
// std::invalid_argument from build_body is the caller's mistake (e.g. a non-object
// Request::extra) -> bad_request with its message; anything else -> internal, naming `provider`.
template <class Accumulator, parse_fn Parse, class BuildBody>
void async_http_call(Transport& transport, const std::string& url, const Headers& headers,
                     const Request& request, const CallContext& ctx, CallCompletion done,
                     const char* provider, BuildBody build_body) noexcept {
  HttpRequest http;
  try {
    http.url = url;
    http.headers = headers;
    http.body = build_body();
    // The caller's id, so a server or proxy can tell an at-least-once redelivery (durable
    // requests after a crash); only when it is a valid header value.
    if (!request.id.empty() && request.id.size() <= 256 &&
        std::all_of(request.id.begin(), request.id.end(),
                    [](char c) { return c >= 0x20 && c < 0x7f; }))
      http.headers.emplace_back("x-laneq-id", request.id);
  } catch (const std::invalid_argument& e) {
    return fail_call(ctx, done, errc::bad_request, e.what());
  } catch (...) {
    return fail_call(ctx, done, errc::internal,
                     std::string(provider) + ": could not build the request body");
  }
  start_http_call<Accumulator, Parse>(transport, std::move(http), request, ctx,
                                      std::move(done));
}

}  // namespace laneq::detail
