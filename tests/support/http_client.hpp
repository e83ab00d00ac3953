#pragma once
// A tiny HTTP/1.1 client for tests: one connection to 127.0.0.1, calls that block for at most
// a timeout (each step runs a private io_context with run_for, so a silent server fails the test
// instead of hanging it), bodies framed by Content-Length, chunked, or read to close.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include <nlohmann/json.hpp>

#include "laneq/request.hpp"

namespace laneq::test {

struct HttpResponse {
  int status = 0;               // 0: the connection ended before a complete head (see `error`)
  std::error_code error{};      // how the connection ended, when it did
  Headers headers{};
  std::string body{};           // chunked bodies are de-chunked
  bool chunked = false;
  bool complete = false;        // the whole framed body arrived

  std::optional<std::string> header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k.size() == name.size() &&
          std::equal(k.begin(), k.end(), name.begin(),
                     [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
        return v;
    return std::nullopt;
  }
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

class HttpClient {
 public:
  explicit HttpClient(unsigned short port,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : timeout_(timeout) {
    const asio::ip::tcp::endpoint ep(asio::ip::make_address_v4("127.0.0.1"), port);
    auto [ec, n] = step([&](auto done) {
      socket_.async_connect(ep, [done](std::error_code e) mutable { done(e, 0); });
    });
    if (ec) throw std::system_error(ec, "HttpClient: connect");
  }

  // Sends one request; adds Host and, with a body, Content-Length (unless `headers` frame it).
  void send(std::string_view method, std::string_view target, const Headers& headers = {},
            std::string_view body = {}) {
    std::string out;
    out += method;
    out += ' ';
    out += target;
    out += " HTTP/1.1\r\nhost: 127.0.0.1\r\n";
    bool framed = false;
    for (const auto& [k, v] : headers) {
      out += k;
      out += ": ";
      out += v;
      out += "\r\n";
      framed = framed || k == "transfer-encoding" || k == "content-length";
    }
    if (!framed && (!body.empty() || method == "POST")) {
      out += "content-length: ";
      out += std::to_string(body.size());
      out += "\r\n";
    }
    out += "\r\n";
    out += body;
    send_raw(out);
  }

  HttpResponse request(std::string_view method, std::string_view target,
                       const Headers& headers = {}, std::string_view body = {}) {
    send(method, target, headers, body);
    return read_response();
  }

  HttpResponse post(std::string_view target, const nlohmann::json& body, Headers headers = {}) {
    headers.emplace_back("content-type", "application/json");
    return request("POST", target, headers, body.dump());
  }

  void send_raw(std::string_view bytes) {
    auto [ec, n] = step([&](auto done) { asio::async_write(socket_, asio::buffer(bytes), done); });
    if (ec) throw std::system_error(ec, "HttpClient: write");
  }

  // The next final response (interim 1xx responses are skipped).
  HttpResponse read_response() {
    for (;;) {
      HttpResponse r = read_head();
      if (r.status == 0) return r;
      if (r.status >= 200) {
        read_body(r);
        return r;
      }
    }
  }

  // Status line and headers only; the body stays to be read with read_body().
  HttpResponse read_head() {
    HttpResponse r;
    std::size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos)
      if (!read_more(r.error)) return r;
    const std::string head = in_.substr(0, end);
    in_.erase(0, end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
      throw std::runtime_error("HttpClient: bad status line: " + status_line);
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const auto start = line_end + 2;
      line_end = head.find("\r\n", start);
      const auto line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const auto colon = line.find(':');
      if (colon == std::string::npos) throw std::runtime_error("HttpClient: bad header: " + line);
      auto value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers.emplace_back(line.substr(0, colon), value);
    }
    return r;
  }

  void read_body(HttpResponse& r) {
    const auto te = r.header("transfer-encoding");
    const auto cl = r.header("content-length");
    if (te && *te == "chunked") {
      r.chunked = true;
      for (;;) {
        std::size_t eol;
        while ((eol = in_.find("\r\n")) == std::string::npos)
          if (!read_more(r.error)) return;
        const std::size_t size = std::stoul(in_.substr(0, eol), nullptr, 16);
        if (size == 0) {
          while (in_.size() < eol + 4)  // no trailers from our server: "0\r\n\r\n"
            if (!read_more(r.error)) return;
          in_.erase(0, eol + 4);
          r.complete = true;
          return;
        }
        while (in_.size() < eol + 2 + size + 2)
          if (!read_more(r.error)) {
            r.body += in_.substr(std::min(in_.size(), eol + 2));
            return;
          }
        r.body += in_.substr(eol + 2, size);
        in_.erase(0, eol + 2 + size + 2);
      }
    }
    if (cl) {
      const std::size_t n = std::stoul(*cl);
      while (in_.size() < n)
        if (!read_more(r.error)) {
          r.body = std::move(in_);
          in_.clear();
          return;
        }
      r.body = in_.substr(0, n);
      in_.erase(0, n);
      r.complete = true;
      return;
    }
    while (read_more(r.error)) {}  // read to close
    r.body = std::move(in_);
    in_.clear();
    r.complete = true;
  }

  // Reads until the bytes received and not consumed yet contain `needle` (false: the connection
  // ended first).
  bool read_until_contains(std::string_view needle) {
    std::error_code ec;
    while (in_.find(needle) == std::string::npos)
      if (!read_more(ec)) return false;
    return true;
  }

  // Reads until the server closes the connection; returns how it ended (eof, connection_reset).
  std::error_code read_until_closed() {
    std::error_code ec;
    while (read_more(ec)) {}
    return ec;
  }

  void close() {
    std::error_code ec;
    socket_.close(ec);
  }

 private:
  // Starts an operation and runs the private io_context until it completes or the timeout
  // passes; a timeout throws (the test fails rather than hangs).
  template <class Start>
  std::pair<std::error_code, std::size_t> step(Start start) {
    std::optional<std::pair<std::error_code, std::size_t>> result;
    start([&result](std::error_code ec, std::size_t n) { result.emplace(ec, n); });
    io_.restart();
    io_.run_for(timeout_);
    if (!result) {
      std::error_code ignored;
      socket_.cancel(ignored);
      io_.restart();
      io_.run();
      throw std::runtime_error("HttpClient: timed out waiting for the server");
    }
    return *result;
  }

  bool read_more(std::error_code& error) {
    char buf[16 * 1024];
    auto [ec, n] = step([&](auto done) { socket_.async_read_some(asio::buffer(buf), done); });
    in_.append(buf, n);
    if (ec) error = ec;
    return !ec;
  }

  std::chrono::milliseconds timeout_;
  asio::io_context io_{1};
  asio::ip::tcp::socket socket_{io_};
  std::string in_{};
};

}  // namespace laneq::test
