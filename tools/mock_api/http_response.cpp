#include "mock_api/http_response.hpp"

#include <cstdio>

namespace laneq::mock {

std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 529: return "Site Overloaded";
    default: return "Unknown";
  }
}

std::string response_head(int status, const HeaderList& headers,
                          std::optional<std::size_t> content_length, bool close, bool chunked) {
  std::string out;
  out.reserve(256 + headers.size() * 48);
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += reason_phrase(status);
  out += "\r\n";
  for (const auto& [name, value] : headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (content_length) {
    out += "content-length: ";
    out += std::to_string(*content_length);
    out += "\r\n";
  } else if (chunked) {
    out += "transfer-encoding: chunked\r\n";
  }
  out += close ? "connection: close\r\n" : "connection: keep-alive\r\n";
  out += "\r\n";
  return out;
}

std::string body_chunk(std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(static_cast<std::size_t>(n) + data.size() + 2);
  out.append(size, static_cast<std::size_t>(n));
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace laneq::mock
