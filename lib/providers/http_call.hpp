#pragma once
// The part every HTTP provider shares: send the HttpRequest through the Transport, feed a
// streamed body through the SSE parser into the wire format's accumulator, and turn the
// HttpResponse into a Response + laneq error. Internal to lib/.
#include <memory>
#include <string>
#include <utility>

#include <asio/error.hpp>

#include "laneq/error.hpp"
#include "laneq/provider.hpp"
#include "laneq/sse.hpp"
#include "laneq/transport.hpp"

namespace laneq::detail {

// Wire: { using Accumulator = ...; static std::error_code parse(int, const Headers&,
//         std::string_view, Response&) noexcept; }
template <class Wire>
void start_http_call(Transport& transport, HttpRequest http, const Request& request,
                     CallContext ctx, CallCompletion done) {
  struct stream_state {
    SseParser parser;
    typename Wire::Accumulator acc;
  };
  std::shared_ptr<stream_state> stream;
  if (request.stream) {
    stream = std::make_shared<stream_state>(stream_state{{}, typename Wire::Accumulator(request.on_delta)});
    http.headers.emplace_back("Accept", "text/event-stream");
    // On the transport's strand, one chunk at a time; the completion below runs after the last.
    http.on_body = [stream](std::string_view chunk) {
      stream->parser.feed(chunk, [&](const SseEvent& e) { stream->acc.on_event(e); });
    };
  }
  transport.async_request(
      std::move(http), ctx.executor, ctx.cancel,
      HttpCompletion([done = std::move(done), stream](std::error_code ec, HttpResponse hr) mutable {
        Response r;
        r.status = hr.status;
        if (ec) {  // no (complete) HTTP answer
          r.error_type = "transport";
          r.error_message = std::move(hr.error);
          r.headers = std::move(hr.headers);
          if (stream) stream->acc.finish(r);  // keep what streamed so far, for the curious
          r.status = hr.status;
          done(ec == asio::error::operation_aborted ? ec : make_error_code(errc::network),
               std::move(r));
          return;
        }
        if (stream && hr.status >= 200 && hr.status < 300) {
          r.headers = std::move(hr.headers);
          std::error_code e = stream->parser.failed() ? make_error_code(errc::malformed_response)
                                                      : stream->acc.finish(r);
          done(e, std::move(r));
          return;
        }
        const std::error_code e = Wire::parse(hr.status, hr.headers, hr.body, r);
        done(e, std::move(r));
      }));
}

// A call that fails before it starts (e.g. a body that cannot be built): reported through
// `done` on the caller's executor, never inline.
void fail_call(CallContext& ctx, CallCompletion& done, std::error_code ec, std::string message);

}  // namespace laneq::detail
