#include "laneq/http/curl_transport.hpp"
#include "laneq/detail/post.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <asio/error.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "laneq/error.hpp"
#include "../ascii_case.hpp"
#include "header_syntax.hpp"

namespace laneq {
namespace detail {

namespace {

// One response's header block, at most (a hostile server's endless header lines). Below
// curl's own bound (300 KB in 8.3, backported to Debian's 7.88, which fails the transfer as a
// receive error, retried as network), so such a block is malformed_response. (A single line
// above curl's 100 KB line limit still fails inside curl, as network.)
constexpr std::size_t max_header_bytes = std::size_t{256} << 10;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Settings curl would take and misuse (a negative timeout; a CA file it cannot read, which
// fails every TLS call as a network error, retried): said at construction instead.
void validate(const CurlTransportConfig& c) {
  const auto bad = [](const std::string& what) {
    throw std::system_error(make_error_code(errc::invalid_config), "CurlTransportConfig::" + what);
  };
  // Sent as given (the user agent as a header line): a line end would add a header of its
  // own, and a NUL would cut the value short.
  constexpr std::string_view line_breaking("\r\n\0", 3);
  if (c.user_agent.find_first_of(line_breaking) != std::string::npos)
    bad("user_agent must not contain CR, LF or NUL");
  if (c.proxy.find_first_of(line_breaking) != std::string::npos)
    bad("proxy must not contain CR, LF or NUL");
  if (c.connect_timeout.count() < 0) bad("connect_timeout must be >= 0");
  if (c.timeout.count() < 0) bad("timeout must be >= 0");
  if (!c.ca_file.empty()) {
    std::FILE* f = std::fopen(c.ca_file.c_str(), "rb");
    if (f == nullptr) bad("ca_file \"" + c.ca_file + "\" cannot be read: " + std::strerror(errno));
    // A directory opens for reading too (and an empty file holds no certificate).
    struct stat st {};
    const bool file = ::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
    std::fclose(f);
    if (!file)
      bad("ca_file \"" + c.ca_file + "\" is not a file of certificates (a directory, or empty)");
  }
}

}  // namespace

// One descriptor curl asked us to watch. Asio watches a duplicate of it (`watch`, ours alone),
// never curl's own number: curl 7.88 closes a socket that never connected (a transfer
// cancelled while it connects) itself, past CURLOPT_CLOSESOCKETFUNCTION (fixed in curl 8.2),
// and an Asio object that owned the number closed it again later, when it was someone else's
// (a journal's file). Closing the duplicate is always safe. Waits hold a shared_ptr, so an
// entry let go while a wait is pending is recognised by `closed`.
struct curl_socket_info {
  curl_socket_info(asio::posix::stream_descriptor w, curl_socket_t f, bool o, struct stat id)
      : watch(std::move(w)), fd(f), ours(o), dev(id.st_dev), ino(id.st_ino) {}
  asio::posix::stream_descriptor watch;
  curl_socket_t fd;  // curl's number
  bool ours;         // opened by on_open_socket; else curl's own (the resolver's wake-up socket)
  dev_t dev;         // the watched file's identity, to tell whether `fd` still names it
  ino_t ino;
  int what = 0;      // CURL_POLL_IN / OUT / INOUT; 0 = curl does not want it watched
  // curl has asked to read from it, so it connected: curl 7.88 closes past the callback only
  // sockets that never did, so no identity check is needed any more (a pooled connection's
  // reuse costs no system call).
  bool connected = false;
  bool reading = false, writing = false, closed = false;
};

struct curl_transfer {
  std::uint64_t id = 0;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  HttpRequest request;
  HttpResponse response;
  int current_status = 0;  // of the header block being read (1xx / redirects come first)
  std::size_t max_body = 0;  // CurlTransportConfig::max_response_bytes
  bool too_large = false;    // the body passed max_body: aborted
  std::size_t body_bytes = 0;  // of the final response, kept or handed to request.on_body
  std::size_t header_bytes = 0;  // of every header block so far (1xx ones too, as curl counts)
  std::string aborted_why;       // a header or write callback aborted the transfer: why
  Transport::executor_type caller;  // work-tracked: the caller's context stays busy
  asio::cancellation_slot slot;
  HttpCompletion done;
  char errbuf[CURL_ERROR_SIZE] = {};

  ~curl_transfer() {
    if (easy) curl_easy_cleanup(easy);
    if (header_list) curl_slist_free_all(header_list);
  }
};

class curl_engine : public std::enable_shared_from_this<curl_engine> {
 public:
  curl_engine(Transport::executor_type ex, CurlTransportConfig cfg)
      : cfg_(std::move(cfg)), strand_(asio::make_strand(ex)), timer_(strand_) {
    validate(cfg_);
    global_init();
    multi_ = curl_multi_init();
    if (!multi_)
      throw std::system_error(make_error_code(errc::invalid_config),
                              "CurlTransport: curl_multi_init failed");
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &curl_engine::on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &curl_engine::on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
    if (cfg_.max_connections_per_host > 0)
      curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                        static_cast<long>(cfg_.max_connections_per_host));
    if (cfg_.max_total_connections > 0)
      curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                        static_cast<long>(cfg_.max_total_connections));
  }

  // After the io_context stopped: end the transfers, close connections. Each completion is
  // posted to its caller's executor, as always: it runs if that io_context runs again, or is
  // destroyed with it - never dropped uncalled while the caller's context lives on.
  void shutdown() {
    for (auto& [id, t] : transfers_) {
      curl_multi_remove_handle(multi_, t->easy);
      complete_destroyed(std::move(t));
    }
    transfers_.clear();
    if (multi_) curl_multi_cleanup(multi_);  // closes pooled connections via on_close_socket
    multi_ = nullptr;
    for (auto& [fd, s] : sockets_) let_go(*s);  // pending waits may still hold these
    sockets_.clear();
    timer_.cancel();
  }

  std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  std::size_t opened() const noexcept { return opened_.load(std::memory_order_relaxed); }

  void start(HttpRequest request, Transport::executor_type ex, asio::cancellation_slot slot,
             HttpCompletion done) {
    auto t = std::make_unique<curl_transfer>();
    t->id = next_id_.fetch_add(1, std::memory_order_relaxed);
    t->request = std::move(request);
    t->caller = asio::prefer(std::move(ex), asio::execution::outstanding_work.tracked);
    t->slot = slot;
    t->done = std::move(done);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    if (slot.is_connected()) {
      // Emitted on the caller's executor; the transfer itself is touched on our strand only.
      slot.assign([weak = weak_from_this(), id = t->id](asio::cancellation_type type) {
        if ((type & asio::cancellation_type::all) == asio::cancellation_type::none) return;
        if (auto self = weak.lock())
          detail::post(self->strand_, [self, id] { self->abort(id); });
      });
    }
    detail::post(strand_, [self = shared_from_this(), t = std::move(t)]() mutable {
      self->add(std::move(t));
    });
  }

 private:
  // --- strand only from here ---

  void add(std::unique_ptr<curl_transfer> t) {
    if (!multi_) return complete_destroyed(std::move(t));  // started just before shutdown()
    if (const auto ec = setup(*t)) return complete(std::move(t), ec);
    const auto id = t->id;
    curl_transfer& ref = *t;
    transfers_.emplace(id, std::move(t));
    if (const CURLMcode mc = curl_multi_add_handle(multi_, ref.easy); mc != CURLM_OK) {
      auto owned = std::move(transfers_.at(id));
      transfers_.erase(id);
      owned->response.error = curl_multi_strerror(mc);
      complete(std::move(owned), make_error_code(errc::network));
    }
  }

  std::error_code setup(curl_transfer& t) {
    t.max_body = cfg_.max_response_bytes;
    // A method goes into the request line as it is: a line end in it would add a header (or
    // a request) of its own.
    if (!detail::is_header_name(t.request.method)) {
      t.response.error = "the request method is not valid HTTP (a token)";
      return make_error_code(errc::bad_request);
    }
    for (const auto& [name, value] : t.request.headers) {
      // Passed to curl as lines: a line end in a value would add a header (or a request) of
      // its own, a NUL would cut it short.
      if (!detail::is_header_name(name) || !detail::is_header_value(value)) {
        t.response.error = "the request header \"" +
                           (detail::is_header_name(name) ? name : std::string("?")) +
                           "\" is not valid HTTP (a token name, no control character in the value)";
        return make_error_code(errc::bad_request);
      }
    }
    t.easy = curl_easy_init();
    if (!t.easy) {
      t.response.error = "curl_easy_init failed";
      return make_error_code(errc::network);
    }
    CURL* e = t.easy;
    const auto& r = t.request;
    curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (r.method == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (r.method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else if (r.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);  // else curl waits for the Content-Length's body
    } else {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
      if (!r.body.empty()) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      }
    }
    for (const auto& [name, value] : r.headers) {
      // "Name:" with nothing after it tells curl to drop the header (its own, or ours unsent);
      // "Name;" is curl's spelling for sending it with an empty value.
      const std::string line = trim(value).empty() ? name + ";" : name + ": " + value;
      t.header_list = curl_slist_append(t.header_list, line.c_str());
    }
    t.header_list = curl_slist_append(t.header_list, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.header_list);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &curl_engine::on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &curl_engine::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &curl_engine::on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, this);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &curl_engine::on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg_.connect_timeout.count()));
    const auto timeout = r.timeout.count() > 0 ? r.timeout : cfg_.timeout;
    if (timeout.count() > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION,
                     cfg_.http2 ? static_cast<long>(CURL_HTTP_VERSION_2TLS)
                                : static_cast<long>(CURL_HTTP_VERSION_1_1));
    // Prefer multiplexing over a new connection, but only where it can happen (h2 needs TLS
    // here): over plain http:// PIPEWAIT holds every new transfer until the first connection's
    // answer is complete, so a burst of N calls took two full round trips instead of one.
    const bool can_multiplex = cfg_.http2 && detail::istarts_with(r.url, "https://");
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, can_multiplex ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, cfg_.verify_tls ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, cfg_.verify_tls ? 2L : 0L);
    if (!cfg_.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, cfg_.ca_file.c_str());
    if (!cfg_.proxy.empty()) {
      curl_easy_setopt(e, CURLOPT_PROXY, cfg_.proxy.c_str());
      // Every host through it: unset, curl still takes the environment's no_proxy, which
      // would send some hosts around the proxy the caller named.
      curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    }
    curl_easy_setopt(e, CURLOPT_USERAGENT, cfg_.user_agent.c_str());
#if LIBCURL_VERSION_NUM >= 0x075700
    // A transfer removed while its name lookup runs (cancelled, timed out, transport destroyed)
    // would otherwise join curl's resolver thread, blocking the io_context until getaddrinfo
    // returns (seconds, with a slow DNS server). With QUICK_EXIT the thread is detached and
    // frees its own data when the lookup ends (asyn-thread.c); the only cost is at program
    // exit, where a lookup still running is not waited for.
    curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
#endif
    return {};
  }

  // The caller's completion: on its executor, after clearing the slot we installed there.
  void complete(std::unique_ptr<curl_transfer> t, std::error_code ec) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    if (ec && t->response.error.empty()) t->response.error = ec.message();
    auto caller = t->caller;
    detail::post(caller, [t = std::move(t), ec]() mutable {
      if (t->slot.is_connected()) t->slot.clear();
      auto done = std::move(t->done);
      HttpResponse resp = std::move(t->response);
      t.reset();  // the easy handle is already out of the multi handle
      done(ec, std::move(resp));
    });
  }

  void complete_destroyed(std::unique_ptr<curl_transfer> t) {
    t->response.error = "the transport was destroyed";
    complete(std::move(t), asio::error::operation_aborted);
  }

  void abort(std::uint64_t id) {
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return;  // finished already
    auto t = std::move(it->second);
    transfers_.erase(it);
    curl_multi_remove_handle(multi_, t->easy);  // an unfinished transfer's connection is closed
    t->response.error = "cancelled";
    complete(std::move(t), asio::error::operation_aborted);
  }

  void action(curl_socket_t fd, int events) {
    if (!multi_) return;
    int running = 0;
    curl_multi_socket_action(multi_, fd, events, &running);
    drain_finished();
  }

  void drain_finished() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      curl_transfer* raw = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &raw);
      const CURLcode result = m->data.result;
      auto it = raw ? transfers_.find(raw->id) : transfers_.end();
      if (it == transfers_.end()) continue;
      auto t = std::move(it->second);
      transfers_.erase(it);
      long status = 0, version = 0;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
      curl_easy_getinfo(t->easy, CURLINFO_HTTP_VERSION, &version);
      curl_multi_remove_handle(multi_, t->easy);
      t->response.status = static_cast<int>(status);
      switch (version) {
        case CURL_HTTP_VERSION_1_0: t->response.http_version = 10; break;
        case CURL_HTTP_VERSION_1_1: t->response.http_version = 11; break;
        case CURL_HTTP_VERSION_2_0: t->response.http_version = 20; break;
        case CURL_HTTP_VERSION_3: t->response.http_version = 30; break;
        default: break;
      }
      std::error_code ec;
      if (!t->aborted_why.empty()) {
        t->response.error = std::move(t->aborted_why);
        t->response.body.clear();
        ec = make_error_code(errc::malformed_response);
      } else if (t->too_large) {
        t->response.error = "the response body is larger than max_response_bytes (" +
                            std::to_string(t->max_body) + ")";
        t->response.body.clear();
        ec = make_error_code(errc::malformed_response);
      } else if (result != CURLE_OK) {
        t->response.error = t->errbuf[0] ? t->errbuf : curl_easy_strerror(result);
        ec = make_error_code(errc::network);
      }
      complete(std::move(t), ec);
    }
  }

  void arm(const std::shared_ptr<curl_socket_info>& s) {
    if (s->closed) return;
    arm_one(s, CURL_POLL_IN, &curl_socket_info::reading,
            asio::posix::descriptor_base::wait_read, CURL_CSELECT_IN);
    arm_one(s, CURL_POLL_OUT, &curl_socket_info::writing,
            asio::posix::descriptor_base::wait_write, CURL_CSELECT_OUT);
  }

  // One direction: while curl wants `poll` and no wait is pending (`waiting`), wait for the
  // socket, tell curl it is ready (`cselect`) and arm again.
  void arm_one(const std::shared_ptr<curl_socket_info>& s, int poll,
               bool curl_socket_info::*waiting, asio::posix::descriptor_base::wait_type type,
               int cselect) {
    if (!(s->what & poll) || (*s).*waiting) return;
    (*s).*waiting = true;
    s->watch.async_wait(type, [self = shared_from_this(), s, poll, waiting,
                               cselect](std::error_code ec) {
      (*s).*waiting = false;
      if (s->closed || !(s->what & poll)) return;
      if (ec == asio::error::operation_aborted) {
        // Cancelled by a "stop watching" (POLL_REMOVE), after which curl asked again (a reused
        // connection) while this wait was still pending, so that request armed nothing: arm
        // it now, or nobody would watch the socket and the transfer would hang.
        self->arm(s);
        return;
      }
      if (ec) {
        // The descriptor cannot be waited on: curl fails the transfer (a network error the
        // queue retries) instead of waiting, unwatched, for its timeout.
        self->action(s->fd, CURL_CSELECT_ERR);
        return;
      }
      self->action(s->fd, cselect);
      self->arm(s);  // curl only calls back when interest changes
    });
  }


  // --- curl callbacks (always inside a curl call, so on the strand) ---

  static int on_socket(CURL*, curl_socket_t fd, int what, void* userp, void*) {
    auto* self = static_cast<curl_engine*>(userp);
    auto it = self->sockets_.find(fd);
    if (what == CURL_POLL_REMOVE) {
      if (it == self->sockets_.end()) return 0;
      auto& s = *it->second;
      // curl's own descriptor, or a socket of ours that curl closed past our callback (one
      // that never connected): let go.
      if (!s.ours || (!s.connected && !still_curls(s))) {
        let_go(s);
        self->sockets_.erase(it);
        return 0;
      }
      // Idle (pooled) or about to close: stop watching, so run() may return while idle.
      s.what = 0;
      std::error_code ignored;
      s.watch.cancel(ignored);
      return 0;
    }
    // An entry whose socket curl may have closed past us (its own wake-up socket, or one of
    // ours that never connected) is checked: its number may now name another socket.
    if (it != self->sockets_.end() && !it->second->connected && !still_curls(*it->second)) {
      let_go(*it->second);
      self->sockets_.erase(it);
      it = self->sockets_.end();
    }
    if (it == self->sockets_.end()) {
      // Not opened through us: the threaded resolver's wake-up socket while a name lookup
      // runs. Unwatched, curl looked at the lookup only on its back-off timer (1, 3, 7 ...
      // 255 ms, then every 250 ms): a 256 ms lookup took 505. If it cannot be watched, that
      // timer is still there.
      auto s = self->watch_new(fd, /*ours=*/false);
      if (!s) return 0;
      it = self->sockets_.emplace(fd, std::move(s)).first;
    }
    it->second->what = what;
    if (it->second->ours && (what & CURL_POLL_IN)) it->second->connected = true;
    self->arm(it->second);
    return 0;
  }

  static int on_timer(CURLM*, long timeout_ms, void* userp) {
    auto* self = static_cast<curl_engine*>(userp);
    if (timeout_ms < 0) {
      self->timer_.cancel();
      return 0;
    }
    // Never call curl from inside its own callback: the next turn runs it. "At once" (0, what
    // curl asks on every new transfer) is a post: arming the timer would cost the reactor a
    // timerfd_settime syscall, twice per call. Running curl's timeout handling early is harmless.
    if (timeout_ms == 0) {
      self->timer_.cancel();
      detail::post(self->strand_, [weak = self->weak_from_this()] {
        if (auto s = weak.lock()) s->action(CURL_SOCKET_TIMEOUT, 0);
      });
      return 0;
    }
    self->timer_.expires_after(std::chrono::milliseconds(timeout_ms));
    self->timer_.async_wait([weak = self->weak_from_this()](std::error_code ec) {
      if (ec) return;
      if (auto s = weak.lock()) s->action(CURL_SOCKET_TIMEOUT, 0);
    });
    return 0;
  }

  static curl_socket_t on_open_socket(void* userp, curlsocktype purpose, curl_sockaddr* addr) {
    auto* self = static_cast<curl_engine*>(userp);
    if (purpose != CURLSOCKTYPE_IPCXN || addr->socktype != SOCK_STREAM ||
        (addr->family != AF_INET && addr->family != AF_INET6))
      return CURL_SOCKET_BAD;
    const int fd = ::socket(addr->family, SOCK_STREAM | SOCK_CLOEXEC, addr->protocol);
    if (fd < 0) return CURL_SOCKET_BAD;
    // A number we still have an entry for is one curl closed past our callback: that entry
    // is dead.
    if (auto it = self->sockets_.find(fd); it != self->sockets_.end()) {
      let_go(*it->second);
      self->sockets_.erase(it);
    }
    auto s = self->watch_new(fd, /*ours=*/true);
    if (!s) {
      ::close(fd);
      return CURL_SOCKET_BAD;
    }
    self->sockets_.emplace(fd, std::move(s));
    self->opened_.fetch_add(1, std::memory_order_relaxed);
    return fd;
  }

  static int on_close_socket(void* userp, curl_socket_t fd) {
    auto* self = static_cast<curl_engine*>(userp);
    if (auto it = self->sockets_.find(fd); it != self->sockets_.end()) {
      let_go(*it->second);
      self->sockets_.erase(it);
    }
    return ::close(fd);  // opened by on_open_socket
  }

  // A watch on a duplicate of curl's descriptor `fd`; null if the system refuses one.
  std::shared_ptr<curl_socket_info> watch_new(curl_socket_t fd, bool ours) {
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return nullptr;
    struct stat id {};
    if (::fstat(dup, &id) != 0) {
      ::close(dup);
      return nullptr;
    }
    asio::posix::stream_descriptor watch(strand_);
    std::error_code ec;
    watch.assign(dup, ec);
    if (ec) {
      ::close(dup);
      return nullptr;
    }
    return std::make_shared<curl_socket_info>(std::move(watch), fd, ours, id);
  }

  // Stops watching and closes the duplicate (never curl's number); pending waits end aborted.
  static void let_go(curl_socket_info& s) {
    s.closed = true;
    std::error_code ignored;
    s.watch.close(ignored);
  }

  // Whether curl's number still names the socket our duplicate watches (closed and reused, it
  // names another file, or none).
  static bool still_curls(const curl_socket_info& s) {
    struct stat now {};
    return ::fstat(s.fd, &now) == 0 && now.st_dev == s.dev && now.st_ino == s.ino;
  }

  // Callbacks must not throw through curl's C code: a failure (no memory) aborts the transfer.
  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* userp) {
    auto* t = static_cast<curl_transfer*>(userp);
    try {
      return read_header(t, std::string_view(data, size * n));
    } catch (const std::exception& e) {
      t->aborted_why = std::string("reading the response headers failed: ") + e.what();
      return 0;  // abort (CURLE_WRITE_ERROR)
    }
  }

  static std::size_t read_header(curl_transfer* t, std::string_view line) {
    // Our bound (max_header_bytes), below curl's: a response this broken is malformed.
    t->header_bytes += line.size();
    if (t->header_bytes > max_header_bytes) {
      t->aborted_why = "the response headers are larger than " +
                       std::to_string(max_header_bytes) + " bytes";
      return 0;
    }
    // A new response block (after a 1xx). curl takes a status line in any case, but reads
    // the code only from "HTTP/": any other spelling is a 200 to it, so to us.
    if (detail::istarts_with(line, "HTTP/")) {
      t->response.headers.clear();
      const auto sp = line.find(' ');
      if (!line.starts_with("HTTP/"))
        t->current_status = 200;
      else
        t->current_status = sp == std::string_view::npos ? 0 : std::atoi(line.data() + sp + 1);
      return line.size();
    }
    // obs-fold (RFC 9112 5.2): a line starting with a space or tab continues the previous
    // header's value; curl 7.88 hands it over as a line of its own.
    if ((line.starts_with(' ') || line.starts_with('\t')) && !t->response.headers.empty()) {
      const auto more = trim(line);
      if (!more.empty()) {
        std::string& value = t->response.headers.back().second;
        if (!value.empty()) value += ' ';
        value += more;
      }
      return line.size();
    }
    const auto colon = line.find(':');
    if (colon != std::string_view::npos && colon > 0)
      t->response.headers.emplace_back(std::string(trim(line.substr(0, colon))),
                                       std::string(trim(line.substr(colon + 1))));
    return line.size();
  }

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* userp) {
    auto* t = static_cast<curl_transfer*>(userp);
    const std::string_view chunk(data, size * n);
    // A body kept whole and a stream alike: a server that streams deltas without end (broken,
    // hostile, a model in a loop with no max_tokens) would grow the consumer's text until the
    // deadline, or for ever on a lane without one. (64 MiB of events is far beyond any answer.)
    t->body_bytes += chunk.size();
    if (t->max_body != 0 && t->body_bytes > t->max_body) {
      t->too_large = true;
      return 0;  // abort (CURLE_WRITE_ERROR)
    }
    // Streams are delivered as they come; an error body is kept whole for its JSON.
    if (t->request.on_body && t->current_status >= 200 && t->current_status < 300) {
      try {
        t->request.on_body(chunk);
      } catch (...) {
        return 0;  // the consumer failed: abort the transfer (CURLE_WRITE_ERROR)
      }
    } else {
      try {
        t->response.body.append(chunk);
      } catch (const std::exception& e) {  // max_response_bytes 0 (unlimited) and no memory
        t->aborted_why = std::string("reading the response body failed: ") + e.what();
        return 0;
      }
    }
    return size * n;
  }

  CurlTransportConfig cfg_;
  asio::strand<Transport::executor_type> strand_;
  asio::steady_timer timer_;
  CURLM* multi_ = nullptr;
  std::unordered_map<curl_socket_t, std::shared_ptr<curl_socket_info>> sockets_;
  std::unordered_map<std::uint64_t, std::unique_ptr<curl_transfer>> transfers_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::size_t> opened_{0};
};

}  // namespace detail

CurlTransport::CurlTransport(executor_type ex, CurlTransportConfig config)
    : executor_(ex), engine_(std::make_shared<detail::curl_engine>(ex, std::move(config))) {}

CurlTransport::~CurlTransport() { engine_->shutdown(); }

void CurlTransport::async_request(HttpRequest request, executor_type ex,
                                  asio::cancellation_slot cancel, HttpCompletion done) {
  engine_->start(std::move(request), std::move(ex), cancel, std::move(done));
}

std::size_t CurlTransport::in_flight() const noexcept { return engine_->in_flight(); }
std::size_t CurlTransport::connections_opened() const noexcept { return engine_->opened(); }

}  // namespace laneq
