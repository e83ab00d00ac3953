#pragma once
// Serialization of HTTP/1.1 responses: the head (status line + headers + framing) and the
// chunks of a chunked body.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "mock_api/http_request.hpp"

namespace laneq::mock {

std::string_view reason_phrase(int status) noexcept;

// Status line and headers, then Content-Length (when `content_length` is set) or
// "Transfer-Encoding: chunked" (unless !chunked: an HTTP/1.0 client, whose body ends when the
// connection closes), and "Connection: close" when `close`.
std::string response_head(int status, const HeaderList& headers,
                          std::optional<std::size_t> content_length, bool close,
                          bool chunked = true);

// One chunk of a chunked body; `data` must not be empty (an empty chunk ends the body).
std::string body_chunk(std::string_view data);

inline constexpr std::string_view last_chunk = "0\r\n\r\n";
inline constexpr std::string_view continue_100 = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace laneq::mock
