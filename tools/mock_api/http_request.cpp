#include "mock_api/http_request.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace laneq::mock {

namespace {

char lower(char c) noexcept { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Does the comma-separated header value contain `token` (case-insensitive)?
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const auto comma = value.find(',');
    if (iequals(trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool is_token_char(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

std::optional<std::string_view> find_header(const HeaderList& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return std::string_view(v);
  return std::nullopt;
}

std::string_view HttpRequest::path() const {
  std::string_view t = target;
  return t.substr(0, t.find('?'));
}

bool HttpRequest::keep_alive() const {
  // Transfer-Encoding beside Content-Length, or in HTTP/1.0: the framing is in doubt (request
  // smuggling), so the connection closes after the answer (RFC 9112 6.1, 6.3).
  if (header("transfer-encoding") && (header("content-length") || minor_version == 0))
    return false;
  const auto connection = header("connection");
  if (minor_version >= 1) return !(connection && has_token(*connection, "close"));
  return connection && has_token(*connection, "keep-alive");
}

RequestParser::Result RequestParser::fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  return Result::error;
}

HttpRequest RequestParser::take() {
  HttpRequest out = std::move(req_);
  req_ = HttpRequest{};
  state_ = State::head;
  pos_ = scanned_ = remaining_ = body_start_ = trailers_start_ = 0;
  expect_continue_ = false;
  return out;
}

std::optional<std::string_view> RequestParser::line(const std::string& in) {
  const auto end = in.find("\r\n", pos_);
  if (end == std::string::npos) return std::nullopt;
  std::string_view l(in.data() + pos_, end - pos_);
  pos_ = end + 2;
  return l;
}

RequestParser::Result RequestParser::parse_head(std::string& in) {
  // Empty lines before a request line are allowed (RFC 9112 2.2).
  while (in.size() >= 2 && in[0] == '\r' && in[1] == '\n') in.erase(0, 2);
  const auto end = in.find("\r\n\r\n", scanned_ > 3 ? scanned_ - 3 : 0);
  if (end == std::string::npos) {
    scanned_ = in.size();
    if (in.size() > max_head_bytes) return fail(431, "request header block exceeds 64 KiB");
    return Result::incomplete;
  }
  if (end > max_head_bytes) return fail(431, "request header block exceeds 64 KiB");
  std::string_view head(in.data(), end);

  const auto first_end = head.find("\r\n");
  std::string_view request_line = head.substr(0, first_end);
  const auto sp1 = request_line.find(' ');
  const auto sp2 = request_line.rfind(' ');
  if (sp1 == std::string_view::npos || sp1 == sp2) return fail(400, "malformed request line");
  const auto method = request_line.substr(0, sp1);
  const auto target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  const auto version = request_line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_token_char))
    return fail(400, "malformed request method");
  if (target.empty() || target.find(' ') != std::string_view::npos)
    return fail(400, "malformed request target");
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || version[7] < '0' || version[7] > '9')
    return fail(400, "unsupported HTTP version (HTTP/1.x only)");
  req_.method = method;
  req_.target = target;
  req_.minor_version = version[7] - '0';

  std::string_view rest = first_end == std::string_view::npos ? std::string_view{}
                                                              : head.substr(first_end + 2);
  while (!rest.empty()) {
    const auto eol = rest.find("\r\n");
    const auto l = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 2);
    if (l.front() == ' ' || l.front() == '\t') return fail(400, "obsolete header line folding");
    const auto colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(400, "malformed header line");
    const auto name = l.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char))
      return fail(400, "malformed header name");
    req_.headers.emplace_back(std::string(name), std::string(trim(l.substr(colon + 1))));
  }
  pos_ = body_start_ = end + 4;

  // Body framing: chunked wins over Content-Length (RFC 9112 6.3).
  if (const auto te = req_.header("transfer-encoding")) {
    if (!iequals(trim(*te), "chunked"))
      return fail(501, "unsupported transfer-encoding (only chunked)");
    state_ = State::chunk_size;
  } else if (const auto cl = req_.header("content-length")) {
    const auto v = trim(*cl);
    std::size_t n = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc{} || p != v.data() + v.size())
      return fail(400, "malformed content-length");
    for (const auto& [k, other] : req_.headers)
      if (iequals(k, "content-length") && trim(other) != v)
        return fail(400, "conflicting content-length headers");
    if (n > max_body_) return fail(413, "request body exceeds the server's limit");
    remaining_ = n;
    state_ = n == 0 ? State::done : State::body_length;
  } else {
    state_ = State::done;
  }
  // An HTTP/1.0 client cannot take an interim 1xx: ignore the expectation (RFC 9110 10.1.1).
  if (state_ != State::done && req_.minor_version >= 1)
    if (const auto expect = req_.header("expect"); expect && iequals(trim(*expect), "100-continue"))
      expect_continue_ = true;
  return Result::incomplete;
}

RequestParser::Result RequestParser::parse(std::string& in) {
  if (state_ == State::head) {
    if (const auto r = parse_head(in); r == Result::error) return r;
    if (state_ == State::head) return Result::incomplete;
  }
  for (;;) {
    switch (state_) {
      case State::head:
        return Result::incomplete;  // unreachable: handled above
      case State::body_length:
      case State::chunk_data: {
        const auto n = std::min(remaining_, in.size() - pos_);
        req_.body.append(in, pos_, n);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ > 0) return Result::incomplete;
        state_ = state_ == State::body_length ? State::done : State::chunk_data_end;
        break;
      }
      case State::chunk_size: {
        const auto l = line(in);
        if (!l) {
          if (in.size() - pos_ > 1024) return fail(400, "malformed chunk size line");
          return Result::incomplete;
        }
        auto v = trim(l->substr(0, l->find(';')));  // chunk extensions are ignored
        std::size_t n = 0;
        const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n, 16);
        if (v.empty() || ec != std::errc{} || p != v.data() + v.size())
          return fail(400, "malformed chunk size");
        if (n > max_body_ - std::min(max_body_, req_.body.size()))
          return fail(413, "request body exceeds the server's limit");
        // Tiny chunks with long extensions keep the body small while the buffer grows: bound
        // the wire bytes too.
        if (const auto wire = pos_ - body_start_;
            wire > max_framing_bytes && wire - max_framing_bytes > max_body_)
          return fail(413, "chunked request body exceeds the server's limit (framing included)");
        remaining_ = n;
        trailers_start_ = pos_;
        state_ = n == 0 ? State::trailers : State::chunk_data;
        break;
      }
      case State::chunk_data_end: {
        if (in.size() - pos_ < 2) return Result::incomplete;
        if (in.compare(pos_, 2, "\r\n") != 0) return fail(400, "chunk data not followed by CRLF");
        pos_ += 2;
        state_ = State::chunk_size;
        break;
      }
      case State::trailers: {
        const auto l = line(in);  // trailer fields are read and ignored
        // The whole section counts, not just the line being read: endless short lines too.
        if ((l ? pos_ : in.size()) - trailers_start_ > max_head_bytes)
          return fail(431, "trailer section exceeds 64 KiB");
        if (!l) return Result::incomplete;
        if (l->empty()) state_ = State::done;
        break;
      }
      case State::done:
        in.erase(0, pos_);
        pos_ = 0;
        return Result::complete;
    }
  }
}

}  // namespace laneq::mock
