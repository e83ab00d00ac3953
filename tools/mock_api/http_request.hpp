#pragma once
// HttpRequest and RequestParser: an incremental HTTP/1.1 request parser (sans-IO). Bytes are fed
// as they arrive; a request is complete once its headers and its body (Content-Length or chunked)
// are in. Leftover bytes (a pipelined next request) stay in the caller's buffer.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace laneq::mock {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// First header named `name` (case-insensitive), or nullopt.
std::optional<std::string_view> find_header(const HeaderList& headers, std::string_view name);

bool iequals(std::string_view a, std::string_view b) noexcept;

struct HttpRequest {
  std::string method{};
  std::string target{};
  int minor_version = 1;  // HTTP/1.<minor>
  HeaderList headers{};
  std::string body{};

  std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
  std::string_view path() const;  // target without the query
  // HTTP/1.1 keeps the connection unless "Connection: close"; 1.0 only with "keep-alive".
  // Never with Transfer-Encoding beside Content-Length, or Transfer-Encoding in HTTP/1.0.
  bool keep_alive() const;
};

class RequestParser {
 public:
  enum class Result { incomplete, complete, error };

  explicit RequestParser(std::size_t max_body_bytes) : max_body_(max_body_bytes) {}

  // Parses what `in` holds beyond what was already consumed. On `complete` the request's bytes
  // are erased from the front of `in` and take() returns the request.
  Result parse(std::string& in);

  bool headers_complete() const noexcept { return state_ > State::head; }
  // "Expect: 100-continue" and the body is still to come: the client waits for an interim 100.
  bool expects_continue() const noexcept { return expect_continue_; }
  HttpRequest take();  // resets the parser for the next request

  // The most bytes one request may take on the wire before parse() fails it: head, body,
  // chunk framing and trailers.
  static constexpr std::size_t max_wire_bytes(std::size_t max_body_bytes) noexcept {
    return 2 * max_head_bytes + max_framing_bytes + max_body_bytes;
  }

  // After `error`: the status to answer with (400, 413, 431 or 501) and why.
  int error_status() const noexcept { return error_status_; }
  const std::string& error_message() const noexcept { return error_message_; }

 private:
  enum class State { head, body_length, chunk_size, chunk_data, chunk_data_end, trailers, done };

  Result fail(int status, std::string message);
  Result parse_head(std::string& in);
  // A CRLF-terminated line starting at pos_, or nullopt while incomplete.
  std::optional<std::string_view> line(const std::string& in);

  static constexpr std::size_t max_head_bytes = 64 * 1024;
  // Chunked bodies: the chunks' wire bytes may exceed the body limit by this much (size lines,
  // extensions, CRLFs); the trailer section as a whole gets max_head_bytes. Consumed bytes stay
  // in `in` until the request completes, so these bound its memory.
  static constexpr std::size_t max_framing_bytes = 64 * 1024;

  std::size_t max_body_;
  State state_ = State::head;
  std::size_t pos_ = 0;        // bytes of `in` consumed by this request so far
  std::size_t scanned_ = 0;    // head: bytes already searched for the blank line
  std::size_t remaining_ = 0;  // body_length / chunk_data: bytes still expected
  std::size_t body_start_ = 0;      // pos_ where the body begins
  std::size_t trailers_start_ = 0;  // pos_ where the trailer section begins
  bool expect_continue_ = false;
  HttpRequest req_{};
  int error_status_ = 0;
  std::string error_message_{};
};

}  // namespace laneq::mock
