// CurlTransport during a name lookup. curl 7.88 resolves names on a thread of its own; this
// binary replaces getaddrinfo (a definition in the executable wins over libc's for libcurl's
// calls) so that names under .stuck-dns.test block until the test lets them go, like a DNS
// server that does not answer; names under .slow-dns.test answer 127.0.0.1 after 256 ms; names
// under .dual-dns.test answer ::1 first, then 127.0.0.1 (a host whose "localhost" has both, in
// front of a server that listens on IPv4 only). Its own binary: the replacement would affect
// any other test.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <netdb.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/laneq.hpp"
#include "mock_api/mock_server_thread.hpp"
#include "support/run.hpp"

using namespace std::chrono_literals;

namespace {

struct StuckLookups {
  std::mutex mu;
  std::condition_variable cv;
  int inside = 0;           // lookups blocked now
  bool released = false;    // let them all go (EAI_NONAME)
  bool by_watchdog = false; // released by the watchdog, not by the test

  void release(bool watchdog) {
    std::lock_guard lock(mu);
    if (!released) by_watchdog = watchdog;
    released = true;
    cv.notify_all();
  }
};
StuckLookups stuck;
// When the last .slow-dns.test lookup returned (the resolver thread's oversleep is not the
// transport's).
std::atomic<std::chrono::steady_clock::time_point> slow_lookup_returned{};

}  // namespace

extern "C" [[gnu::visibility("default")]] int getaddrinfo(const char* node, const char* service,
                                                          const addrinfo* hints, addrinfo** res) {
  using fn = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  if (node != nullptr && std::string_view(node).ends_with(".stuck-dns.test")) {
    std::unique_lock lock(stuck.mu);
    ++stuck.inside;
    stuck.cv.notify_all();
    stuck.cv.wait(lock, [] { return stuck.released; });
    --stuck.inside;
    stuck.cv.notify_all();
    return EAI_NONAME;
  }
  static const auto real = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  const auto numeric = [&](const char* address, addrinfo** out) {
    addrinfo h = hints ? *hints : addrinfo{};
    h.ai_flags |= AI_NUMERICHOST;
    h.ai_family = AF_UNSPEC;
    return real(address, service, &h, out);
  };
  if (node != nullptr && std::string_view(node).ends_with(".slow-dns.test")) {
    std::this_thread::sleep_for(256ms);  // a DNS server that takes its time (curl's thread)
    const int rc = numeric("127.0.0.1", res);
    slow_lookup_returned = std::chrono::steady_clock::now();
    return rc;
  }
  if (node != nullptr && std::string_view(node).ends_with(".dual-dns.test")) {
    addrinfo* v6 = nullptr;
    if (const int rc = numeric("::1", &v6); rc != 0) return rc;
    addrinfo* last = v6;
    while (last->ai_next) last = last->ai_next;
    if (const int rc = numeric("127.0.0.1", &last->ai_next); rc != 0) {
      freeaddrinfo(v6);
      return rc;
    }
    *res = v6;  // glibc's freeaddrinfo frees node by node: one chain of both is fine
    return 0;
  }
  return real(node, service, hints, res);
}

TEST_CASE("cancelling a transfer during its name lookup completes it at once - the io_context "
          "does not wait for the lookup",
          "[transport][dns]") {
  // Without this, a cancel joined curl's resolver thread: the io_context stood still until the
  // lookup ended. The watchdog ends the lookup after 5 s so that such a build fails, not hangs.
  std::thread watchdog([] {
    std::unique_lock lock(stuck.mu);
    if (!stuck.cv.wait_for(lock, 5s, [] { return stuck.released; })) {
      lock.unlock();
      stuck.release(true);
    }
  });
  asio::io_context io;
  std::error_code got{};
  bool done = false, lookup_running_at_completion = false;
  {
    laneq::CurlTransport transport(io.get_executor());
    asio::cancellation_signal cancel;
    laneq::async_http(transport,
                      {.method = "GET", .url = "http://api.stuck-dns.test:8080/v1/models"},
                      asio::bind_cancellation_slot(
                          cancel.slot(), [&](std::error_code ec, laneq::HttpResponse) {
                            got = ec;
                            done = true;
                            std::lock_guard lock(stuck.mu);
                            lookup_running_at_completion = stuck.inside == 1 && !stuck.released;
                          }));
    // Cancel once the lookup is blocked in getaddrinfo (polled from the loop itself).
    asio::steady_timer poll(io);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    bool lookup_reached = false;
    std::function<void()> wait_for_lookup = [&] {
      poll.expires_after(1ms);
      poll.async_wait([&](std::error_code) {
        bool inside;
        {
          std::lock_guard lock(stuck.mu);
          inside = stuck.inside == 1;
        }
        lookup_reached = inside;
        // (cancelled anyway after 30 s: a lookup that never reaches the stub fails the test
        // below instead of hanging it)
        if (inside || std::chrono::steady_clock::now() > give_up)
          cancel.emit(asio::cancellation_type::terminal);
        else wait_for_lookup();
      });
    };
    wait_for_lookup();
    io.run();
    CHECK(lookup_reached);
  }
  CHECK(done);
  CHECK(got == asio::error::operation_aborted);
  CHECK(lookup_running_at_completion);
  stuck.release(false);
  {
    std::unique_lock lock(stuck.mu);
    stuck.cv.wait(lock, [] { return stuck.inside == 0; });  // curl's thread has left the lookup
    CHECK_FALSE(stuck.by_watchdog);
  }
  watchdog.join();
}

namespace {
auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);
}  // namespace

TEST_CASE("a name that resolves to ::1 then 127.0.0.1 reaches an IPv4-only server - every new "
          "connection, one transport",
          "[transport][dns]") {
  // curl 7.88 closes a socket whose connect failed (::1, refused) itself, past
  // CURLOPT_CLOSESOCKETFUNCTION; the IPv4 socket then gets the same number. A transport that
  // let Asio own curl's descriptors closed the new socket with the stale one.
  laneq::mock::MockServerThread mock;  // listens on 127.0.0.1 only
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const std::string url =
      "http://api.dual-dns.test:" + std::to_string(mock.port()) + "/stats";
  int ok = 0;
  laneq::test::run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 20; ++i) {
      // Connection: close, so that each request opens a connection (and tries ::1 first).
      laneq::HttpRequest get{.method = "GET", .url = url, .headers = {{"Connection", "close"}}};
      auto [ec, r] = co_await laneq::async_http(transport, std::move(get), tuple_awaitable);
      INFO(i << ": " << ec.message() << " " << r.error);
      CHECK_FALSE(ec);
      if (!ec && r.status != 0) ++ok;
    }
  });
  CHECK(ok == 20);
  CHECK(transport.in_flight() == 0);
}

// A bound on real time with at most 250 ms of room by design (the bug it catches is curl's
// 250 ms back-off): checked by the plain build, hidden under the sanitizers ("[.]"), whose
// slower exchange and stalls eat that room; the stuck-lookup tests run the same wake-up path
// under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LANEQ_NOT_UNDER_SANITIZERS "[.]"
#else
#define LANEQ_NOT_UNDER_SANITIZERS ""
#endif
TEST_CASE("a connection waits for a slow name lookup no longer than the lookup takes",
          "[transport][dns]" LANEQ_NOT_UNDER_SANITIZERS) {
  // curl's resolver thread wakes curl through a socket pair; unwatched, curl only looked at the
  // lookup on its back-off timer (1, 3, 7 ... 255 ms, then every 250 ms): 256 ms became 505.
  laneq::mock::MockServerThread mock;
  const std::string url = "http://api.slow-dns.test:" + std::to_string(mock.port()) + "/stats";
  // The rest of the exchange after the lookup returned: the back-off made it ~250 ms more on
  // every try; a machine that stalls (other tests beside this one on 2 cores) only on some.
  // Up to 3 tries, each with its own transport (curl caches the name).
  std::chrono::steady_clock::duration best = std::chrono::hours(1);
  for (int attempt = 0; attempt < 3 && best >= 200ms; ++attempt) {
    asio::io_context io;
    laneq::CurlTransport transport(io.get_executor());
    std::chrono::steady_clock::duration took{};
    std::chrono::steady_clock::time_point done{};
    laneq::test::run(io, [&]() -> asio::awaitable<void> {
      const auto t0 = std::chrono::steady_clock::now();
      laneq::HttpRequest get{.method = "GET", .url = url};
      auto [ec, r] = co_await laneq::async_http(transport, std::move(get), tuple_awaitable);
      done = std::chrono::steady_clock::now();
      took = done - t0;
      CHECK_FALSE(ec);
    });
    CHECK(took >= 256ms);
    best = std::min(best, done - slow_lookup_returned.load());
  }
  CHECK(best < 200ms);
}
