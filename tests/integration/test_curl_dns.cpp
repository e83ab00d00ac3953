// CurlTransport during a name lookup. curl 7.88 resolves names on a thread of its own; this
// binary replaces getaddrinfo (a definition in the executable wins over libc's for libcurl's
// calls) so that names under .stuck-dns.test block until the test lets them go, like a DNS
// server that does not answer. Its own binary: the replacement would affect any other test.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <netdb.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/steady_timer.hpp>

#include "laneq/laneq.hpp"

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
