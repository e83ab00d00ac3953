// CurlTransport over real sockets on 127.0.0.1: against nginx (TLS + HTTP/2, started by the
// fixture with a certificate made at test time) and against the mock API server (HTTP/1.1).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>

#include "laneq/laneq.hpp"
#include "mock_api/mock_server_thread.hpp"
#include "support/nginx_fixture.hpp"
#include "support/run.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using laneq::errc;
using laneq::test::run;

namespace {

auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

laneq::HttpRequest chat_post(const std::string& url, std::string key = "sk-test") {
  return {.method = "POST",
          .url = url,
          .headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer " + key}},
          .body = R"({"model":"gpt-test","messages":[{"role":"user","content":"hi"}],"max_tokens":8})"};
}

// A server of one connection on 127.0.0.1, written by hand: it reads one request's head and
// answers `response` as given (what neither nginx nor the mock would send).
class OneResponseServer {
 public:
  explicit OneResponseServer(std::string response)
      : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}),
        thread_([this, response = std::move(response)] {
          asio::ip::tcp::socket s(io_);
          acceptor_.accept(s);
          std::error_code ec;
          while (request_.find("\r\n\r\n") == std::string::npos && !ec) {
            char buf[1024];
            request_.append(buf, s.read_some(asio::buffer(buf), ec));
          }
          asio::write(s, asio::buffer(response), ec);
        }) {}
  ~OneResponseServer() { stop(); }
  // Ends the server: if no exchange happened, a connection that closes at once ends its accept.
  void stop() {
    if (!thread_.joinable()) return;
    asio::ip::tcp::socket s(io_);
    std::error_code ec;
    s.connect(acceptor_.local_endpoint(), ec);
    s.close(ec);
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) +
           "/v1/chat/completions";
  }
  // Sends `req` through a CurlTransport and returns what it completed with.
  std::pair<std::error_code, laneq::HttpResponse> exchange(laneq::HttpRequest req) {
    asio::io_context io;
    laneq::CurlTransport transport(io.get_executor());
    std::pair<std::error_code, laneq::HttpResponse> got;
    laneq::async_http(transport, std::move(req), [&](std::error_code ec, laneq::HttpResponse r) {
      got = {ec, std::move(r)};
    });
    io.run();
    return got;
  }
  // The request head it read (after the exchange: joins the server).
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::string request_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("TLS verification fails without the CA and succeeds with it - over HTTP/2",
          "[transport][tls]") {
  laneq::test::NginxFixture nginx;
  asio::io_context io;
  run(io, [&]() -> asio::awaitable<void> {
    {
      laneq::CurlTransport untrusting(io.get_executor());  // the system's CAs only
      // Named, not braced in the call: GCC 12 miscompiles such temporaries across co_await.
      laneq::HttpRequest get{.method = "GET", .url = nginx.url()};
      auto [ec, r] = co_await laneq::async_http(untrusting, std::move(get), tuple_awaitable);
      CHECK(ec == errc::network);
      CHECK(r.status == 0);
      CHECK_THAT(r.error, Catch::Contains("certificate") || Catch::Contains("SSL"));
    }
    laneq::CurlTransport trusting(io.get_executor(), {.ca_file = nginx.ca_file()});
    laneq::HttpRequest get{.method = "GET", .url = nginx.url()};
    auto [ec, r] = co_await laneq::async_http(trusting, std::move(get), tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(r.status == 200);
    CHECK(r.body == R"({"ok":true})");
    CHECK(r.http_version == 20);
  });
}

TEST_CASE("concurrent requests to an HTTP/2 server share one multiplexed connection",
          "[transport][tls]") {
  laneq::test::NginxFixture nginx;
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor(), {.ca_file = nginx.ca_file()});
  // Warm up: the first exchange opens the connection and learns that it speaks h2.
  auto first = laneq::async_http(transport, {.method = "GET", .url = nginx.url()}, asio::use_future);
  io.run();
  REQUIRE(first.get().status == 200);
  io.restart();
  int ok = 0;
  for (int i = 0; i < 20; ++i)
    laneq::async_http(transport, {.method = "GET", .url = nginx.url()},
                      [&](std::error_code ec, laneq::HttpResponse r) {
                        if (!ec && r.status == 200 && r.http_version == 20) ++ok;
                      });
  io.run();
  CHECK(ok == 20);
  CHECK(transport.connections_opened() == 1);
}

TEST_CASE("the transport works with callbacks - futures and coroutines against the mock",
          "[transport]") {
  laneq::mock::MockServerThread mock;
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const std::string url = mock.base_url() + "/v1/chat/completions";

  auto fut = laneq::async_http(transport, chat_post(url), asio::use_future);
  laneq::HttpResponse from_callback;
  laneq::async_http(transport, chat_post(url),
                    [&](std::error_code ec, laneq::HttpResponse r) {
                      CHECK_FALSE(ec);
                      from_callback = std::move(r);
                    });
  io.run();
  const auto r = fut.get();
  CHECK(r.status == 200);
  CHECK(r.http_version == 11);
  CHECK(nlohmann::json::parse(r.body)["usage"]["completion_tokens"] == 8);
  CHECK(from_callback.status == 200);
  const laneq::Response as_response{.headers = from_callback.headers};  // named: header() points in
  const auto* ct = as_response.header("content-type");
  REQUIRE(ct != nullptr);
  CHECK_THAT(*ct, Catch::Contains("application/json"));
}

TEST_CASE("sequential requests reuse one keep-alive connection - io_context::run returns when idle",
          "[transport]") {
  laneq::mock::MockServerThread mock;
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const std::string url = mock.base_url() + "/v1/chat/completions";
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 10; ++i) {
      auto [ec, r] = co_await laneq::async_http(transport, chat_post(url), tuple_awaitable);
      CHECK_FALSE(ec);
      CHECK(r.status == 200);
    }
  });  // run() returned: a pooled idle connection keeps no work alive
  CHECK(transport.connections_opened() == 1);
  CHECK(transport.in_flight() == 0);
}

TEST_CASE("64 transfers at once all complete - all in flight together over plain HTTP/1.1",
          "[transport]") {
  // 3 s per answer: long enough that every transfer reaches the server before the first
  // answer comes back (64 connections, under TSan on a loaded machine too), unless curl holds
  // new transfers back waiting to multiplex (PIPEWAIT on http://, which cannot multiplex: the
  // server then saw 1, later 63).
  laneq::mock::MockServerThread mock({.latency = 3000ms});
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const std::string url = mock.base_url() + "/v1/chat/completions";
  int ok = 0;
  for (int i = 0; i < 64; ++i)
    laneq::async_http(transport, chat_post(url), [&](std::error_code ec, laneq::HttpResponse r) {
      if (!ec && r.status == 200) ++ok;
    });
  const auto t0 = std::chrono::steady_clock::now();
  io.run();
  CHECK(ok == 64);
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // in parallel, not 64 x 3 s in a row
  CHECK(mock.stats()["peak_in_flight"] == 64);
}

TEST_CASE("a refused connection is a network error - not a hang", "[transport]") {
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  // A port bound but not listening, held for the whole test: refused for sure, and no other
  // test's server can take it meanwhile (a port found free and released could be).
  asio::ip::tcp::socket held(io);
  held.open(asio::ip::tcp::v4());
  held.bind({asio::ip::make_address("127.0.0.1"), 0});
  const auto port = held.local_endpoint().port();
  auto fut = laneq::async_http(
      transport, chat_post("http://127.0.0.1:" + std::to_string(port) + "/v1/chat/completions"),
      asio::use_future);
  std::error_code ec;
  try {
    io.run();
    fut.get();
  } catch (const std::system_error& e) {
    ec = e.code();
  }
  CHECK(ec == errc::network);
}

TEST_CASE("settings curl would misuse are refused at construction, naming the field",
          "[transport][config]") {
  asio::io_context io;
  const auto refused = [&](laneq::CurlTransportConfig c, const std::string& says) {
    try {
      laneq::CurlTransport t(io.get_executor(), std::move(c));
      FAIL("accepted: " + says);
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  };
  refused({.connect_timeout = std::chrono::milliseconds(-1)}, "connect_timeout must be >= 0");
  refused({.timeout = std::chrono::milliseconds(-5)}, "timeout must be >= 0");
  refused({.ca_file = "/nonexistent/laneq-ca.pem"},
          "ca_file \"/nonexistent/laneq-ca.pem\" cannot be read: No such file");
  refused({.user_agent = "laneq\r\nX-Injected: 1"}, "user_agent must not contain CR, LF or NUL");
  refused({.user_agent = std::string("laneq\0tail", 10)}, "user_agent must not contain");
  refused({.proxy = "http://127.0.0.1:1\n"}, "proxy must not contain CR, LF or NUL");
  // a directory opens for reading too; an empty file holds no certificate
  const auto dir = std::filesystem::temp_directory_path();
  refused({.ca_file = dir.string()}, "is not a file of certificates");
  const auto empty = dir / ("laneq-empty-ca-" + std::to_string(::getpid()) + ".pem");
  { std::ofstream touch(empty); }
  refused({.ca_file = empty.string()}, "is not a file of certificates");
  std::filesystem::remove(empty);
  laneq::CurlTransport fine(io.get_executor(), {.connect_timeout = std::chrono::milliseconds(0)});
}

TEST_CASE("a configured proxy takes every host, also one the environment's no_proxy names",
          "[transport][proxy]") {
  // The test processes export no_proxy with .test in it (support/catch_main.cpp): unset,
  // CURLOPT_NOPROXY falls back to it, and this call went straight to a name that resolves
  // nowhere instead of to the proxy the caller named.
  OneResponseServer proxy("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
  const std::string port = proxy.url().substr(std::string("http://127.0.0.1:").size());
  asio::io_context io;
  laneq::CurlTransport transport(
      io.get_executor(), {.proxy = "http://127.0.0.1:" + port.substr(0, port.find('/'))});
  std::pair<std::error_code, laneq::HttpResponse> got;
  laneq::async_http(transport, {.method = "GET", .url = "http://api.proxied.test/v1/models"},
                    [&](std::error_code ec, laneq::HttpResponse r) { got = {ec, std::move(r)}; });
  io.run();
  INFO(got.first.message() << " " << got.second.error);
  CHECK_FALSE(got.first);
  CHECK(got.second.status == 200);
  CHECK(got.second.body == "ok");
  CHECK(proxy.request().rfind("GET http://api.proxied.test/v1/models HTTP/1.1\r\n", 0) == 0);
}

TEST_CASE("cancelling a transfer aborts it and the server sees the connection close",
          "[transport]") {
  laneq::mock::MockServerThread mock({.latency = 5s});
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const std::string url = mock.base_url() + "/v1/chat/completions";
  run(io, [&]() -> asio::awaitable<void> {
    const auto t0 = std::chrono::steady_clock::now();
    // cancelled once the mock has the request (not after a guessed delay)
    const auto mock_has_it = [&] { return mock.stats()["in_flight"] == 1; };
    auto res = co_await (laneq::async_http(transport, chat_post(url), tuple_awaitable) ||
                         laneq::test::wait_until(mock_has_it));
    CHECK(res.index() == 1);
    CHECK(std::chrono::steady_clock::now() - t0 < 4s);  // not the mock's 5 s
  });
  CHECK(transport.in_flight() == 0);
  CHECK(mock.wait_stats([](const nlohmann::json& s) {
    return s["connections"]["closed_in_flight"].get<int>() >= 1;
  }));
}

TEST_CASE("a transport destroyed with transfers in flight completes each of them once, with "
          "operation_aborted, when its io_context runs again",
          "[transport][lifetime]") {
  laneq::mock::MockServerThread mock({.latency = 5s});
  asio::io_context io;
  std::vector<std::error_code> got;
  {
    laneq::CurlTransport transport(io.get_executor());
    for (int i = 0; i < 2; ++i)
      transport.async_request(chat_post(mock.base_url() + "/v1/chat/completions"),
                              io.get_executor(), {},
                              [&](std::error_code ec, laneq::HttpResponse) { got.push_back(ec); });
    // a first transfer under way, the second only posted to the transport's strand
    io.run_one();
  }  // destroyed with both pending; nothing runs the io_context meanwhile
  io.restart();
  io.run();
  CHECK(got == std::vector<std::error_code>(2, make_error_code(asio::error::operation_aborted)));
}

TEST_CASE("a folded header line (obs-fold) continues the previous header's value - it is not "
          "read as a header of its own",
          "[transport]") {
  // A server of one response, written by hand: folded headers are obsolete, so neither nginx
  // nor the mock sends them, but old proxies still do.
  const std::string body = R"({"ok":true})";
  OneResponseServer server("HTTP/1.1 200 OK\r\n"
                           "X-Note: first part\r\n"
                           " second: part\r\n"
                           "\tthird part\r\n"
                           "X-After: 1\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n"
                           "Connection: close\r\n\r\n" + body);
  const laneq::HttpResponse r = server.exchange(chat_post(server.url())).second;
  CHECK(r.status == 200);
  CHECK(r.body == R"({"ok":true})");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"X-Note", "first part second: part third part"}, {"X-After", "1"}};
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& [name, value] : r.headers)
    if (name.starts_with("X-") || name == "second") got.emplace_back(name, value);
  CHECK(got == want);
}

TEST_CASE("request headers: a line end or control character is refused unsent, an empty value "
          "is sent empty",
          "[transport]") {
  {
    OneResponseServer server("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
    auto req = chat_post(server.url());
    req.headers.emplace_back("X-Empty", "");
    const auto [ec, r] = server.exchange(req);
    CHECK_FALSE(ec);
    CHECK(r.status == 204);
    CHECK_THAT(server.request(), Catch::Contains("\r\nX-Empty:"));
  }
  laneq::mock::MockServerThread mock;
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const auto refused = [&](std::string name, std::string value) {
    auto req = chat_post(mock.base_url() + "/v1/chat/completions");
    req.headers.emplace_back(std::move(name), std::move(value));
    auto fut = laneq::async_http(transport, std::move(req), asio::use_future);
    io.restart();
    io.run();
    try {
      fut.get();
      FAIL("sent");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::bad_request);
    }
  };
  refused("X-A", "1\r\nX-Injected: yes");
  refused("X-A", std::string("1\0tail", 6));
  refused("X-A: b", "1");
  refused("", "1");
  CHECK(mock.stats()["requests"] == 0);  // none reached the server
}

TEST_CASE("a response header block larger than 256 KiB aborts its transfer with "
          "malformed_response",
          "[transport]") {
  std::string head = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; head.size() < (std::size_t{2} << 20); ++i)
    head += "X-" + std::to_string(i) + ": " + std::string(100, 'v') + "\r\n";
  OneResponseServer server(head + "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
  const auto [ec, r] = server.exchange(chat_post(server.url()));
  CHECK(ec == errc::malformed_response);
  CHECK_THAT(r.error, Catch::Contains("headers are larger than"));
  CHECK(r.headers.size() < 20000);
}

TEST_CASE("1xx header blocks count toward the 256 KiB bound: a flood of 103s is "
          "malformed_response, not curl's own limit's network error (retried)",
          "[transport]") {
  std::string heads;
  while (heads.size() < (std::size_t{400} << 10))
    heads += "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
  OneResponseServer server(heads +
                           "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  const auto [ec, r] = server.exchange(chat_post(server.url()));
  CHECK(ec == errc::malformed_response);
  CHECK_THAT(r.error, Catch::Contains("headers are larger than"));
}

TEST_CASE("a lowercase status line (curl takes it) still streams its 2xx body", "[transport]") {
  OneResponseServer server(
      "http/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 12\r\n"
      "Connection: close\r\n\r\ndata: hi\n\n\n\n");
  laneq::HttpRequest req = chat_post(server.url());
  std::string streamed;
  req.on_body = [&](std::string_view chunk) { streamed += chunk; };
  const auto [ec, r] = server.exchange(std::move(req));
  CHECK_FALSE(ec);
  CHECK(r.status == 200);
  CHECK(streamed == "data: hi\n\n\n\n");  // handed on, not kept as a whole body
  CHECK(r.body.empty());
  CHECK(r.headers.size() == 3);
  // curl reads the code only after "HTTP/": any other spelling is a 200 to it, and so to us
  // (a body kept whole while curl says 200 read as a stream cut short)
  OneResponseServer other("http/1.1 429 Too Many Requests\r\nContent-Length: 12\r\n"
                          "Connection: close\r\n\r\ndata: hi\n\n\n\n");
  laneq::HttpRequest again = chat_post(other.url());
  std::string handed;
  again.on_body = [&](std::string_view chunk) { handed += chunk; };
  const auto [ec2, r2] = other.exchange(std::move(again));
  CHECK_FALSE(ec2);
  CHECK(r2.status == 200);
  CHECK(handed == "data: hi\n\n\n\n");
}

TEST_CASE("a method that is not an HTTP token is bad_request, unsent", "[transport]") {
  OneResponseServer server("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  laneq::HttpRequest req = chat_post(server.url());
  req.method = "DELETE /evil HTTP/1.1\r\nX-Injected: yes\r\nX-Pad:";
  const auto [ec, r] = server.exchange(std::move(req));
  CHECK(ec == errc::bad_request);
  CHECK_THAT(r.error, Catch::Contains("method"));
  server.stop();
  CHECK(server.request().empty());  // nothing reached the server
}

TEST_CASE("a stream longer than max_response_bytes aborts with malformed_response",
          "[transport]") {
  std::string events;
  while (events.size() < 4096) events += "data: {\"x\":\"0123456789\"}\n\n";
  OneResponseServer server("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           "Content-Length: " + std::to_string(events.size()) +
                           "\r\nConnection: close\r\n\r\n" + events);
  asio::io_context io;
  laneq::CurlTransport small(io.get_executor(), {.max_response_bytes = 1024});
  laneq::HttpRequest req = chat_post(server.url());
  std::size_t streamed = 0;
  req.on_body = [&](std::string_view chunk) { streamed += chunk.size(); };
  std::pair<std::error_code, laneq::HttpResponse> got;
  laneq::async_http(small, std::move(req), [&](std::error_code ec, laneq::HttpResponse r) {
    got = {ec, std::move(r)};
  });
  io.run();
  CHECK(got.first == errc::malformed_response);
  CHECK_THAT(got.second.error, Catch::Contains("max_response_bytes"));
  CHECK(streamed <= 1024);
}

TEST_CASE("a body larger than max_response_bytes aborts its transfer with malformed_response",
          "[transport]") {
  laneq::mock::MockServerThread mock;
  asio::io_context io;
  laneq::CurlTransport small(io.get_executor(), {.max_response_bytes = 64});
  laneq::CurlTransport roomy(io.get_executor());
  const std::string url = mock.base_url() + "/v1/chat/completions";
  run(io, [&]() -> asio::awaitable<void> {
    auto [e1, r1] = co_await laneq::async_http(small, chat_post(url), tuple_awaitable);
    CHECK(e1 == errc::malformed_response);
    CHECK_THAT(r1.error, Catch::Contains("max_response_bytes"));
    CHECK(r1.body.empty());
    auto [e2, r2] = co_await laneq::async_http(roomy, chat_post(url), tuple_awaitable);
    CHECK_FALSE(e2);
    CHECK(r2.body.size() > 64);
  });
}

TEST_CASE("a transfer cancelled while it connects leaves no descriptor of curl's to the "
          "transport - a file that gets the number later stays open",
          "[transport][lifetime]") {
  // curl 7.88 closes a socket that never connected itself, past CURLOPT_CLOSESOCKETFUNCTION. A
  // transport whose Asio socket owned that number closed it again later: by then, whatever the
  // process had opened under the number (a journal's file).
  asio::io_context io;
  // A listener whose backlog is full: a connect to it stays pending.
  asio::ip::tcp::acceptor full(io, {asio::ip::make_address_v4("127.0.0.1"), 0});
  full.listen(0);
  asio::ip::tcp::socket first(io);
  first.connect(full.local_endpoint());  // takes the one place in the backlog
  const std::string url = "http://127.0.0.1:" + std::to_string(full.local_endpoint().port()) + "/";
  const auto open_descriptors = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator{});
  };
  const auto before = open_descriptors();
  int file = -1;
  {
    laneq::CurlTransport transport(io.get_executor());
    run(io, [&]() -> asio::awaitable<void> {
      asio::steady_timer t(io, 100ms);
      laneq::HttpRequest get{.method = "GET", .url = url};
      auto res = co_await (laneq::async_http(transport, std::move(get), tuple_awaitable) ||
                           t.async_wait(asio::use_awaitable));
      CHECK(res.index() == 1);
    });
    CHECK(transport.connections_opened() == 1);
    file = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // the lowest free number
    REQUIRE(file >= 0);
    io.restart();
    io.poll();
  }  // the transport is destroyed: it must close nothing of the file's
  CHECK(::fcntl(file, F_GETFD) != -1);
  ::close(file);
  CHECK(open_descriptors() == before);  // and it leaves none of its own (curl's, duplicates)
}

TEST_CASE("a HEAD request completes with the headers - it does not wait for a body", "[transport][tls]") {
  laneq::test::NginxFixture nginx;
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor(), {.ca_file = nginx.ca_file()});
  run(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer t(io, 5s);
    laneq::HttpRequest head{.method = "HEAD", .url = nginx.url()};
    auto res = co_await (laneq::async_http(transport, std::move(head), tuple_awaitable) ||
                         t.async_wait(asio::use_awaitable));
    REQUIRE(res.index() == 0);
    auto [ec, r] = std::get<0>(std::move(res));
    CHECK_FALSE(ec);
    CHECK(r.status == 200);
    CHECK(r.body.empty());
  });
}
