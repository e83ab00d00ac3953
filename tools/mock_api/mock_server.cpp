#include "mock_api/mock_server.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include <asio/basic_socket_acceptor.hpp>
#include <asio/basic_stream_socket.hpp>
#include <asio/basic_waitable_timer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "mock_api/http_response.hpp"
#include "mock_api/responder.hpp"

namespace laneq::mock {

namespace detail {

using asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;
using Socket = asio::basic_stream_socket<tcp, Strand>;
using Acceptor = asio::basic_socket_acceptor<tcp, Strand>;
using Timer = asio::basic_waitable_timer<std::chrono::steady_clock,
                                         asio::wait_traits<std::chrono::steady_clock>, Strand>;
constexpr auto use_tuple = asio::experimental::as_tuple(asio::use_awaitable);

class Session;

struct ServerCore : std::enable_shared_from_this<ServerCore> {
  ServerCore(asio::io_context& context, MockConfig config)
      : io(context), responder(config), acceptor(asio::make_strand(context)) {
    const tcp::endpoint endpoint(asio::ip::make_address_v4("127.0.0.1"), config.port);
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(asio::socket_base::max_listen_connections);
    port = acceptor.local_endpoint().port();
  }

  // false once stopped: the session must not run.
  bool add(std::uint64_t id, const std::shared_ptr<Session>& s) {
    std::lock_guard lock(mu);
    if (stopped) return false;
    sessions.emplace(id, s);
    return true;
  }
  void remove(std::uint64_t id) {
    std::lock_guard lock(mu);
    sessions.erase(id);
  }
  void stop();

  asio::io_context& io;
  Responder responder;
  Acceptor acceptor;
  unsigned short port = 0;
  std::mutex mu;
  bool started = false;
  bool stopped = false;
  std::uint64_t next_session = 0;
  std::unordered_map<std::uint64_t, std::weak_ptr<Session>> sessions;
};

// One connection: reads requests (keep-alive, pipelining tolerated), has the Responder plan
// each answer and carries the plan out. Everything runs on the connection's strand.
class Session {
 public:
  Session(std::shared_ptr<ServerCore> core, Socket socket, std::uint64_t id)
      : core_(std::move(core)), socket_(std::move(socket)), timer_(socket_.get_executor()), id_(id) {
    stats().connection_opened();
  }
  ~Session() {
    stats().connection_closed();
    core_->remove(id_);
  }

  Strand executor() { return socket_.get_executor(); }

  // From stop(), on the strand: every pending operation completes with an error.
  void close() {
    stopped_ = true;
    timer_.cancel();
    std::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  static asio::awaitable<void> run(std::shared_ptr<Session> self) {
    try {
      co_await self->serve_connection();
    } catch (const std::exception&) {
      // A bug in one connection must not take the server down; the connection just closes.
    }
    self->close_gracefully();
  }

 private:
  enum class Wait { elapsed, client_closed, stopped };

  MockStats& stats() { return core_->responder.stats(); }

  asio::awaitable<void> serve_connection() {
    RequestParser parser(core_->responder.config().max_body_bytes);
    bool continue_sent = false;
    bool body_awaited = false;  // counted once per request
    char buf[16 * 1024];
    for (;;) {
      const auto r = parser.parse(in_);
      if (r == RequestParser::Result::error) {
        const std::string body = nlohmann::json{{"error", {{"message", parser.error_message()}}}}.dump();
        HeaderList headers{{"content-type", "application/json"}};
        std::string out = response_head(parser.error_status(), headers, body.size(), true);
        out += body;
        co_await asio::async_write(socket_, asio::buffer(out), use_tuple);
        co_await drain();
        co_return;
      }
      if (r == RequestParser::Result::incomplete) {
        if (parser.expects_continue() && !continue_sent) {
          continue_sent = true;
          auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(continue_100), use_tuple);
          if (ec) co_return;
        }
        if (parser.headers_complete() && !body_awaited) {
          body_awaited = true;
          stats().waited_for_body();
        }
        auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf), use_tuple);
        if (ec) co_return;  // the client closed an idle connection (or stop())
        in_.append(buf, n);
        continue;
      }
      continue_sent = body_awaited = false;
      const HttpRequest request = parser.take();
      // (after a large request: not its whole size kept for the connection's life)
      if (in_.capacity() > (1u << 20) && in_.size() < in_.capacity() / 4) in_.shrink_to_fit();
      if (!co_await serve(request)) co_return;
    }
  }

  // Carries out one answer; false: the connection is done.
  asio::awaitable<bool> serve(const HttpRequest& request) {
    auto& responder = core_->responder;
    const Plan plan = responder.plan(request, std::chrono::steady_clock::now(),
                                     std::chrono::system_clock::now());
    bool delivered = false;
    bool keep = !plan.close;
    Wait w = Wait::elapsed;
    if (plan.latency.count() > 0) w = co_await wait(plan.latency);
    if (w == Wait::elapsed) {
      switch (plan.kind) {
        case Plan::Kind::reply:
          if (plan.events.empty())
            w = co_await send_body(plan, request.method == "HEAD");
          else
            w = co_await send_stream(plan);
          delivered = w == Wait::elapsed;
          break;
        case Plan::Kind::reset: {
          stats().reset_sent();
          std::error_code ec;
          socket_.set_option(asio::socket_base::linger(true, 0), ec);  // close sends RST
          socket_.close(ec);
          keep = false;
          break;
        }
        case Plan::Kind::stall:
        case Plan::Kind::cut:
          w = co_await send_partial(plan);
          if (w == Wait::elapsed && plan.kind == Plan::Kind::stall) w = co_await wait_for_close();
          keep = false;
          break;
      }
    }
    if (w == Wait::client_closed) stats().closed_in_flight();
    responder.finish(plan, delivered, std::chrono::steady_clock::now());
    co_return keep && w == Wait::elapsed;
  }

  asio::awaitable<Wait> write(std::string_view data) {
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(data), use_tuple);
    if (stopped_) co_return Wait::stopped;
    co_return ec ? Wait::client_closed : Wait::elapsed;
  }

  // by_status and the 429 / 5xx counts are about API calls, not /stats or /control/*.
  void count_status(const Plan& plan) {
    if (plan.api_call) stats().status_sent(plan.status);
  }

  // One stream event: a chunk, or as is when the stream is unframed (HTTP/1.0).
  static std::string frame(const Plan& plan, const std::string& event) {
    return plan.unframed ? event : body_chunk(event);
  }

  // (An answer to HEAD has the head alone: its content-length is the body a GET would get.)
  asio::awaitable<Wait> send_body(const Plan& plan, bool head_only) {
    count_status(plan);
    std::string out = response_head(plan.status, plan.headers, plan.body.size(), plan.close);
    if (!head_only) out += plan.body;
    co_return co_await write(out);
  }

  asio::awaitable<Wait> send_stream(const Plan& plan) {
    count_status(plan);
    co_return co_await send_events(plan, plan.events.size(), true);
  }

  // Head and the first part of the answer: half the body, or the first partial_events events.
  asio::awaitable<Wait> send_partial(const Plan& plan) {
    count_status(plan);
    if (!plan.events.empty())
      co_return co_await send_events(plan, std::min(plan.partial_events, plan.events.size()),
                                     false);
    std::string out = response_head(plan.status, plan.headers, plan.body.size(), plan.close);
    out.append(plan.body, 0, plan.body.size() / 2);
    co_return co_await write(out);
  }

  // The head and the first `n` events, chunk_delay apart (the delay is between events: the
  // last goes out with the body's end when `end`, so a client that has its answer may close at
  // once without being a call cut short). An unframed stream's end is the close.
  asio::awaitable<Wait> send_events(const Plan& plan, std::size_t n, bool end) {
    std::string out =
        response_head(plan.status, plan.headers, std::nullopt, plan.close, !plan.unframed);
    const bool paced = plan.chunk_delay.count() > 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (i > 0 && paced) {
        if (const auto w = co_await wait(plan.chunk_delay); w != Wait::elapsed) co_return w;
      }
      out += frame(plan, plan.events[i]);
      if (paced && i + 1 < n) {
        if (const auto w = co_await write(out); w != Wait::elapsed) co_return w;
        out.clear();
      }
    }
    if (end && !plan.unframed) out += last_chunk;
    co_return co_await write(out);
  }

  // Waits `d`, watching the connection: a client that closes meanwhile is noticed at once
  // (a cancelled call), and bytes that arrive (a pipelined request) are kept - up to the
  // largest request the parser takes; beyond that the timer alone is awaited (what the client
  // sends waits in the kernel), so a client cannot grow this connection's memory for ever.
  asio::awaitable<Wait> wait(std::chrono::nanoseconds d) {
    using namespace asio::experimental::awaitable_operators;
    timer_.expires_after(d);
    const auto max_kept =
        RequestParser::max_wire_bytes(core_->responder.config().max_body_bytes);
    for (;;) {
      if (in_.size() >= max_kept) {
        auto [ec] = co_await timer_.async_wait(use_tuple);
        co_return stopped_ || ec ? Wait::stopped : Wait::elapsed;
      }
      auto r = co_await (timer_.async_wait(use_tuple) ||
                         socket_.async_wait(tcp::socket::wait_read, use_tuple));
      if (stopped_) co_return Wait::stopped;
      if (r.index() == 0) co_return std::get<0>(std::get<0>(r)) ? Wait::stopped : Wait::elapsed;
      if (std::get<0>(std::get<1>(r))) co_return Wait::client_closed;
      char buf[4096];
      std::error_code ec;
      const auto n = socket_.read_some(asio::buffer(buf), ec);  // readable: does not block
      if (ec) co_return Wait::client_closed;
      in_.append(buf, n);
    }
  }

  asio::awaitable<Wait> wait_for_close() {
    char buf[4096];
    for (;;) {
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf), use_tuple);
      if (stopped_) co_return Wait::stopped;
      if (ec) co_return Wait::client_closed;
    }
  }

  // After an error answer to a request that was not read in full: closing with unread bytes
  // would send RST, which can destroy the answer in flight. Stop sending, then read and discard
  // until the client closes (for at most a few seconds).
  asio::awaitable<void> drain() {
    using namespace asio::experimental::awaitable_operators;
    std::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) co_return;
    timer_.expires_after(std::chrono::seconds(3));
    char buf[4096];
    for (;;) {
      auto r = co_await (timer_.async_wait(use_tuple) ||
                         socket_.async_read_some(asio::buffer(buf), use_tuple));
      if (stopped_ || r.index() == 0 || std::get<0>(std::get<1>(r))) co_return;
    }
  }

  void close_gracefully() {
    std::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    socket_.close(ec);
  }

  std::shared_ptr<ServerCore> core_;
  Socket socket_;
  Timer timer_;
  std::uint64_t id_;
  std::string in_;
  bool stopped_ = false;
};

void ServerCore::stop() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mu);
    if (stopped) return;
    stopped = true;
    for (auto& [id, weak] : sessions)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  asio::post(acceptor.get_executor(), [self = shared_from_this()] {
    std::error_code ec;
    self->acceptor.close(ec);
  });
  for (auto& s : live) asio::post(s->executor(), [s] { s->close(); });
}

asio::awaitable<void> accept_loop(std::shared_ptr<ServerCore> core) {
  for (;;) {
    auto [ec, socket] = co_await core->acceptor.async_accept(asio::make_strand(core->io), use_tuple);
    if (!core->acceptor.is_open()) co_return;
    if (ec) {
      // E.g. out of file descriptors: pause briefly rather than spin on the error.
      Timer pause(core->acceptor.get_executor(), std::chrono::milliseconds(5));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    std::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::uint64_t id = 0;
    {
      std::lock_guard lock(core->mu);
      id = core->next_session++;
    }
    auto session = std::make_shared<Session>(core, std::move(socket), id);
    if (!core->add(id, session)) co_return;
    asio::co_spawn(session->executor(), Session::run(session), asio::detached);
  }
}

}  // namespace detail

MockServer::MockServer(asio::io_context& io, MockConfig config)
    : core_(std::make_shared<detail::ServerCore>(io, std::move(config))) {}

MockServer::~MockServer() { stop(); }

unsigned short MockServer::port() const noexcept { return core_->port; }

std::string MockServer::base_url() const {
  std::string url = "http://127.0.0.1:";
  url += std::to_string(core_->port);
  return url;
}

void MockServer::start() {
  {
    std::lock_guard lock(core_->mu);
    if (core_->started || core_->stopped) return;
    core_->started = true;
  }
  asio::co_spawn(core_->acceptor.get_executor(), detail::accept_loop(core_), asio::detached);
}

void MockServer::stop() { core_->stop(); }

nlohmann::json MockServer::stats() const { return core_->responder.stats().to_json(); }
void MockServer::reset_stats() { core_->responder.stats().reset(); }
void MockServer::reset() { core_->responder.reset(); }
bool MockServer::wait_stats(const std::function<bool(const nlohmann::json&)>& pred,
                            std::chrono::milliseconds timeout) const {
  return core_->responder.stats().wait(pred, timeout);
}
void MockServer::set_config(MockConfig config) { core_->responder.set_config(std::move(config)); }
MockConfig MockServer::config() const { return core_->responder.config(); }
void MockServer::script(std::vector<MockOutcome> outcomes) {
  core_->responder.script(std::move(outcomes));
}

}  // namespace laneq::mock
