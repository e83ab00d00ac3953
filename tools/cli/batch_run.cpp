#include "cli/batch_run.hpp"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>

#include "cli/batch_line.hpp"
#include "cli/progress.hpp"
#include "laneq/detail/url_for_display.hpp"
#include "laneq/laneq.hpp"
#include "mock_api/mock_server.hpp"

// Until the event loop watches SIGINT and SIGTERM (just before it runs), a signal ends the
// set-up at once: the queue has not started, so nothing was sent; a journal commits whole
// transactions and a resume cuts a torn last output line, so quitting here loses nothing. It is
// what a Ctrl-C while a large input (or a pipe) is read should do.
extern "C" void laneq_quit_during_setup(int) {
  static constexpr char msg[] = "\nlaneq: interrupted during set-up: nothing was sent\n";
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  ::_exit(130);
}

namespace laneq::cli {

namespace {

constexpr int setup_signals[] = {SIGINT, SIGTERM};
struct sigaction actions_before_setup[2];
bool setup_handler_installed[2] = {false, false};

// A signal the process was started with ignored (`laneq run ... &` in a script) stays ignored.
void quit_on_signals_during_setup() {
  struct sigaction sa {};
  sa.sa_handler = laneq_quit_during_setup;
  ::sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 2; ++i) {
    if (::sigaction(setup_signals[i], nullptr, &actions_before_setup[i]) != 0 ||
        actions_before_setup[i].sa_handler == SIG_IGN)
      continue;
    setup_handler_installed[i] = ::sigaction(setup_signals[i], &sa, nullptr) == 0;
  }
}

// The signals the run itself stops on: those the process was not started with ignored.
bool ignored_at_start(int i) { return actions_before_setup[i].sa_handler == SIG_IGN; }

// A set-up step failed: while what was set up is torn down and the error is reported, a
// signal must not say "interrupted" instead of the error.
void restore_signals_after_failed_setup() {
  for (int i = 0; i < 2; ++i)
    if (std::exchange(setup_handler_installed[i], false))
      ::sigaction(setup_signals[i], &actions_before_setup[i], nullptr);
}

using steady = std::chrono::steady_clock;

// A failure that ends the run before it starts (exit code 2), with what to do about it.
struct setup_error {
  std::string message;
};

// Runs one set-up step and returns what it makes. Any exception from it (a socket that cannot
// be opened or bound, no file descriptor left, no memory) becomes a setup_error that says which
// step failed: exit code 2 and one line on stderr, as the README promises, not std::terminate.
template <class F>
auto setup_step(const std::string& what, F&& f) -> decltype(std::forward<F>(f)()) {
  try {
    return std::forward<F>(f)();
  } catch (const setup_error&) {
    restore_signals_after_failed_setup();
    throw;  // says what to do already
  } catch (const std::exception& e) {
    restore_signals_after_failed_setup();
    throw setup_error{what + ": " + e.what()};
  }
}

std::vector<LaneName> lane_names() {
  std::vector<LaneName> out;
  for (const auto& l : default_lanes()) out.push_back({l.name, static_cast<int>(l.priority)});
  return out;
}

// The input file, parsed; duplicates of a custom_id seen on an earlier line become bad lines.
std::vector<std::variant<BatchLine, BadLine>> read_input(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw setup_error{"cannot read " + path + ": " + std::strerror(errno)};
  const auto lanes = lane_names();
  std::vector<std::variant<BatchLine, BadLine>> items;
  std::unordered_map<std::string, std::size_t> first_seen;
  std::string text;
  for (std::size_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    auto item = parse_batch_line(text, line_no, lanes);
    if (auto* line = std::get_if<BatchLine>(&item)) {
      const auto [it, fresh] = first_seen.emplace(line->custom_id, line_no);
      if (!fresh)
        item = BadLine{line_no, "", "duplicate_custom_id",
                       "line " + std::to_string(line_no) + ": custom_id \"" + line->custom_id +
                           "\" is already used on line " + std::to_string(it->second)};
    } else if (auto* b = std::get_if<BadLine>(&item); !b->custom_id.empty()) {
      // A bad line's output names its custom_id too: once per output, like a good line's.
      if (!first_seen.emplace(b->custom_id, line_no).second) b->custom_id.clear();
    }
    items.push_back(std::move(item));
  }
  if (in.bad()) throw setup_error{"error reading " + path};
  return items;
}

// What an earlier run left in the output file, read without changing it.
struct EarlierOutput {
  std::unordered_map<std::string, bool> results;  // custom_id -> succeeded
  std::unordered_set<std::string> called;         // custom_ids whose result came from a call
  std::unordered_set<std::string> journal_errors;  // custom_ids whose last line is code journal
  std::unordered_set<std::size_t> bad_lines;      // input line numbers
  std::uintmax_t whole_bytes = 0;                 // the whole lines, from the start
  bool torn = false;                              // half a line follows them (a crash mid-write)
};

EarlierOutput read_earlier_output(const std::string& path) {
  EarlierOutput out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  std::string text;
  for (std::size_t line_no = 1; std::getline(in, text); ++line_no) {
    if (in.eof()) break;  // no newline after it: torn by a crash mid-write (cut_torn_line)
    const OutputLineKey key = read_output_line(text);
    if (!key.complete)  // whole, but not this tool's: cutting here would lose what follows
      throw setup_error{path + ": line " + std::to_string(line_no) +
                        " is not a result line of laneq run (edited, or another file?): fix or "
                        "remove it, or choose another --out"};
    if (key.bad_line_no > 0) out.bad_lines.insert(key.bad_line_no);
    else out.results[key.custom_id] = key.succeeded;
    if (key.succeeded || key.called) out.called.insert(key.custom_id);
    if (key.journal_error) out.journal_errors.insert(key.custom_id);
    else out.journal_errors.erase(key.custom_id);
    out.whole_bytes += text.size() + 1;
  }
  in.close();
  std::error_code ec;
  out.torn = std::filesystem::file_size(path, ec) != out.whole_bytes && !ec;
  return out;
}

// Cuts the torn last line read_earlier_output found. Only once the output is known to be this
// journal's run: a refused resume leaves the file as it was.
void cut_torn_line(const std::string& path, const EarlierOutput& earlier) {
  if (!earlier.torn) return;
  std::error_code ec;
  std::filesystem::resize_file(path, earlier.whole_bytes, ec);
  if (ec) throw setup_error{"cannot repair " + path + ": " + ec.message()};
}

// Whether two paths name one file: the same file (hard or symbolic links), or, for files that
// need not exist yet, the same absolute path once ".", ".." and the symbolic links of its
// existing part are resolved.
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  const auto resolved = [](const std::string& p, std::error_code& e) {
    const fs::path abs = fs::absolute(p, e);
    return e ? fs::path() : fs::weakly_canonical(abs, e);
  };
  std::error_code ec_a, ec_b;
  const fs::path ca = resolved(a, ec_a), cb = resolved(b, ec_b);
  return !ec_a && !ec_b && ca == cb;
}

// --out naming the input, the journal, or a file SQLite keeps beside it (the resume would
// truncate or append to the live database): refused before anything is opened.
void check_output_path(const RunOptions& o) {
  if (same_file(o.input, o.output)) throw setup_error{"--out " + o.output + " is the input file"};
  if (o.journal.empty()) return;
  if (same_file(o.output, o.journal))
    throw setup_error{"--out " + o.output + " and --journal " + o.journal +
                      " name the same file: the results would overwrite the journal; choose "
                      "another --out"};
  for (const char* suffix : {"-wal", "-shm", "-journal"})
    if (same_file(o.output, o.journal + suffix))
      throw setup_error{"--out " + o.output + " is " + o.journal + suffix +
                        ", a file SQLite keeps beside --journal " + o.journal +
                        ": the results would corrupt the journal; choose another --out"};
  // A resume reads --out back first: a pipe, a FIFO or a terminal would block that read for
  // ever (nothing else writes to it), before the run even said it started.
  std::error_code ec;
  const auto st = std::filesystem::status(o.output, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw setup_error{"--out " + o.output + " is not a regular file: with --journal, a resume "
                      "reads the results back; write them to a file"};
}

std::unique_ptr<Provider> make_provider(const RunOptions& o, Transport& transport,
                                        const std::string& base_url, const std::string& key) {
  try {
    if (o.provider == "anthropic")
      return std::make_unique<AnthropicProvider>(transport, AnthropicConfig{.api_key = key, .base_url = base_url});
    return std::make_unique<OpenAIProvider>(transport, OpenAIConfig{.api_key = key, .base_url = base_url});
  } catch (const std::system_error& e) {
    const std::string what = e.what();
    if (what.find("no API key") == std::string::npos) throw setup_error{what};  // e.g. a bad URL
    const char* env = o.provider == "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
    throw setup_error{what + "\n  set " + env +
                      ", or --base-url for an endpoint that needs no key, or --mock for a demo "
                      "against the bundled mock API server"};
  }
}

class BatchRun {
 public:
  explicit BatchRun(const RunOptions& o) : o_(o) {}

  int run() {
    quit_on_signals_during_setup();  // until `signals` below takes them over
    // (Non-copyable objects come back from setup_step by guaranteed copy elision.)
    asio::io_context io =
        setup_step("cannot set up the event loop", [] { return asio::io_context(); });
    items_ = setup_step("cannot read " + o_.input, [&] { return read_input(o_.input); });
    // The mock server (a member) runs on `io` (a local): it must go before `io` does, on every
    // way out of here, errors included, or its sockets are closed through a destroyed context.
    struct ResetMock {
      std::optional<mock::MockServer>& mock;
      ~ResetMock() { mock.reset(); }
    } reset_mock{mock_};
    std::string base_url = o_.base_url, key;
    if (o_.mock) {
      // The mock enforces the same limits server-side: a 429 would show that laneq overran them.
      setup_step("cannot start the mock API server", [&] {
        mock_.emplace(io, mock::MockConfig{.latency = o_.mock_latency,
                                           .jitter = o_.mock_latency / 2,
                                           .rpm = o_.rpm, .rpm_slice = o_.mock_rpm_slice,
                                           .tpm = o_.tpm});
        mock_->start();
      });
      base_url = mock_->base_url();
      key = "sk-mock";
    }
    // --timeout bounds each call attempt (a timed-out one is retried as a network error), not
    // queue wait + call: a journaled deadline would carry over into a resume and fail every
    // line left pending by a long enough break.
    CurlTransport transport = setup_step("cannot set up the HTTP transport", [&] {
      return CurlTransport(io.get_executor(), {.timeout = o_.timeout});
    });
    const auto provider = setup_step("cannot set up the provider", [&] {
      return make_provider(o_, transport, base_url, key);
    });

    QueueConfig cfg{.workers = static_cast<std::size_t>(o_.workers),
                    .reserved_workers = static_cast<std::size_t>(
                        std::min(o_.reserved_workers, o_.workers - 1)),
                    .fair_share = o_.fair_by_tokens ? FairShare::tokens : FairShare::requests,
                    .rate_limits = {.requests = o_.rpm, .tokens = o_.tpm, .smooth = o_.smooth},
                    .retry = {.max_attempts = static_cast<std::uint32_t>(o_.max_attempts)}};
    for (auto& lane : cfg.lanes) lane.timeout = {};  // batch work: no queue deadlines
    if (!o_.journal.empty()) {
      cfg.journal = o_.journal;
      cfg.on_durable_result = [this](std::string_view id, std::error_code ec, const Response& r) {
        on_result(std::string(id), ec, r);
      };
    }
    std::optional<RequestQueue> queue;
    setup_step("cannot set up the request queue",
               [&] { queue.emplace(io.get_executor(), *provider, std::move(cfg)); });
    queue_ = &*queue;

    setup_step("cannot prepare " + o_.output, [&] {
      prepare_output();
      count_lines();
      print_start(base_url);
    });
    setup_step("cannot start the queue and submit the lines", [&] {
      queue->start();
      submit_all();
    });

    std::optional<asio::signal_set> watched;  // (Asio 1.22's signal_set cannot be moved)
    setup_step("cannot watch for SIGINT and SIGTERM", [&] {
      watched.emplace(io);  // its service's first use opens a pipe: may fail
      for (int i = 0; i < 2; ++i)
        if (!ignored_at_start(i)) watched->add(setup_signals[i]);
    });
    asio::signal_set& signals = *watched;
    signals.async_wait([&](std::error_code ec, int) {
      // A signal whose handler was queued before stopped() cancelled the wait: the run is over.
      if (ec || stopped_) return;
      signals.async_wait([](std::error_code e, int) {
        if (!e) ::_exit(130);  // the journal's committed state is safe as it is
      });
      if (finishing_) {  // every line is done, the queue is draining: nothing left to stop
        std::fprintf(stderr, "\nlaneq: finishing: every line is done (signal again to quit at "
                             "once)\n");
        return;
      }
      interrupted_ = true;
      std::fprintf(stderr, "\nlaneq: stopping: no new calls; finishing the calls in flight "
                           "(signal again to quit at once)\n");
      queue_->async_shutdown({.drain = false}, [this](std::error_code) { stopped(); });
    });
    signals_ = &signals;
    asio::steady_timer ticker(io);
    ticker_ = &ticker;
    tick();
    maybe_finish();
    io.run();

    std::fclose(out_);
    return report();
  }

 private:
  // --- set-up ---

  void prepare_output() {
    const bool resume = !o_.journal.empty();
    if (resume) {
      earlier_ = read_earlier_output(o_.output);
      // Outcomes the journal committed but the output missed (a crash between the two).
      auto finished = list_rows(JournalStateSet::finished());
      // A result of a call (a success, or a failure such as network) that the journal never
      // finished is not from this journal's run: trusting it would skip its line, running it
      // again would write its custom_id twice. (Other failures may be refused before they were
      // journaled, e.g. exceeds_rate_limit: they stay as they are.)
      // Open rows are this journal's too: an outcome it could not commit (a full disk) leaves
      // its row pending and its error line, answer included, in the output.
      const auto open = list_rows(JournalStateSet::open());
      for (const auto& rec : open) open_ids_.insert(rec.id);
      std::unordered_set<std::string> known(open_ids_);
      for (const auto& rec : finished) known.insert(rec.id);
      check_same_requests(open, finished);
      for (const auto& id : earlier_.called)
        if (!known.contains(id))
          throw setup_error{o_.output + " holds a result for \"" + id + "\" that the journal " +
                            o_.journal + " does not: it is from another run; choose another " +
                            "--out, or the journal that run used"};
      // Rows left open (pending, or in flight at a crash): the queue's recovery runs them and
      // on_durable_result reports them. Their lines are not submitted again (count_lines).
      cut_torn_line(o_.output, earlier_);  // the output is this run's: now it may be repaired
      out_ = open_output("ab");
      for (auto& rec : finished) {
        // (a line that says the journal failed it is not its last word: the row's outcome is)
        if (earlier_.results.contains(rec.id) && !earlier_.journal_errors.contains(rec.id))
          continue;
        const Response r = rec.response.value_or(Response{});
        write_line(result_line(rec.id, rec.error, r));
        earlier_.results[rec.id] = rec.state == JournalState::succeeded;
      }
      // A line the journal could not store (its append failed: no row) never ran: run it.
      for (const auto& id : earlier_.journal_errors)
        if (!known.contains(id)) earlier_.results.erase(id);
    } else {
      out_ = open_output("wb");
    }
  }

  // A journal is matched to the input by custom_id: one from another input (or a line edited
  // since) would answer its lines with that run's results, or run the old request again.
  void check_same_requests(const std::vector<JournalRecord>& open,
                           const std::vector<JournalRecord>& finished) const {
    std::unordered_map<std::string_view, const Request*> held;
    for (const auto* rows : {&open, &finished})
      for (const auto& rec : *rows) held.emplace(rec.id, &rec.request);
    const auto same = [](const Request& a, const Request& b) {
      if (a.model != b.model || a.max_tokens != b.max_tokens || a.extra != b.extra ||
          a.messages.size() != b.messages.size())
        return false;
      for (std::size_t i = 0; i < a.messages.size(); ++i)
        if (a.messages[i].role != b.messages[i].role ||
            a.messages[i].content != b.messages[i].content)
          return false;
      return true;
    };
    for (const auto& item : items_) {
      if (const auto* bad = std::get_if<BadLine>(&item)) {  // edited into a bad line
        // (a second line reusing a custom_id is bad in every run: the first one holds the row)
        if (!bad->custom_id.empty() && bad->code != "duplicate_custom_id" &&
            held.contains(bad->custom_id))
          throw setup_error{"line " + std::to_string(bad->line_no) + " (custom_id \"" +
                            bad->custom_id + "\") cannot run (" + bad->code + ") but the " +
                            "journal " + o_.journal + " holds a request under that id: the " +
                            "journal is another input's (or the line changed since); use the " +
                            "input that run used, or a fresh --journal"};
        continue;
      }
      const auto* line = std::get_if<BatchLine>(&item);
      const auto it = held.find(line->custom_id);
      if (it != held.end() && !same(line->request, *it->second))
        throw setup_error{"line " + std::to_string(line->line_no) + " (custom_id \"" +
                          line->custom_id + "\") is not the request the journal " + o_.journal +
                          " holds under that id: the journal is another input's (or the line " +
                          "changed since); use the input that run used, or a fresh --journal"};
    }
  }

  // Before the loop runs: the queue's recovery has not started, so no row changes meanwhile.
  std::vector<JournalRecord> list_rows(JournalStateSet states) {
    std::promise<std::pair<std::error_code, std::vector<JournalRecord>>> p;
    queue_->journal()->list({.states = states},
                            [&](std::error_code ec, std::vector<JournalRecord> v) {
      p.set_value({ec, std::move(v)});
    });
    auto [ec, records] = p.get_future().get();  // before the loop runs: nothing to block
    if (ec) throw setup_error{"cannot read the journal " + o_.journal + ": " + ec.message()};
    return std::move(records);
  }

  std::FILE* open_output(const char* mode) {
    std::FILE* f = std::fopen(o_.output.c_str(), mode);
    if (!f) throw setup_error{"cannot write " + o_.output + ": " + std::strerror(errno)};
    return f;
  }

  void count_lines() {
    for (const auto& l : default_lanes())
      lanes_.push_back({.name = l.name, .priority = static_cast<int>(l.priority)});
    state_.total = items_.size();
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (const auto* bad = std::get_if<BadLine>(&items_[i])) {
        ++bad_;
        if (!earlier_.bad_lines.contains(bad->line_no)) write_line(bad_line_output(*bad));
        count_done(std::nullopt, false);
        continue;
      }
      const auto& line = std::get<BatchLine>(items_[i]);
      const std::size_t lane = lane_of(line.priority);
      lane_by_id_[line.custom_id] = lane;
      ++lanes_[lane].total;
      if (open_ids_.contains(line.custom_id)) {
        // Its journal row is open: recovery runs it and reports it. Submitted again, it could
        // be refused by an admission check that comes before the journal's duplicate check
        // (exceeds_rate_limit, ...) and be reported twice. (An open row wins over an error line
        // an earlier run wrote for it: a journal write error leaves the row open.)
        ++recovered_count_;
      } else if (const auto it = earlier_.results.find(line.custom_id); it != earlier_.results.end()) {
        ++earlier_count_;
        ++lanes_[lane].earlier;
        counted_.insert(line.custom_id);
        count_done(lane, it->second);
      } else {
        to_submit_.push_back(i);
      }
    }
    // Open rows of lines no longer in the file run too: counted from the start, so that the
    // run does not finish (and shut the queue down) before they do.
    for (const auto& id : open_ids_)
      if (!lane_by_id_.contains(id)) ++state_.total;
  }

  std::size_t lane_of(int priority) const {
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      if (lanes_[i].priority == priority) return i;
    return 0;  // parse_batch_line only accepts configured lanes
  }

  // Where the provider sends the calls: with no --base-url, its environment variable's URL
  // (as the provider reads it) or its default. Without a query or user:password@ (a key in a
  // CI log otherwise).
  std::string shown_url(const std::string& base_url) const {
    if (!base_url.empty()) return laneq::detail::url_for_display(base_url);
    const char* env = o_.provider == "anthropic" ? "ANTHROPIC_BASE_URL" : "OPENAI_BASE_URL";
    if (const char* v = std::getenv(env); v && *v)
      return laneq::detail::url_for_display(v) + " ($" + env + ")";
    return "its default URL";
  }

  void print_start(const std::string& base_url) {
    std::string limits;
    if (o_.rpm > 0) limits += std::to_string(o_.rpm) + " requests/min";
    if (o_.tpm > 0) limits += (limits.empty() ? "" : ", ") + std::to_string(o_.tpm) + " tokens/min";
    if (limits.empty()) limits = "none";
    else if (o_.smooth) limits += ", smooth";
    std::fprintf(stderr,
                 "laneq: %zu lines from %s (%zu malformed, %zu done in an earlier run, %zu to run)\n"
                 "laneq: %s at %s, %lld workers, rate limits: %s%s%s\n",
                 items_.size(), o_.input.c_str(), bad_, earlier_count_,
                 to_submit_.size() + recovered_count_,
                 o_.provider.c_str(), shown_url(base_url).c_str(),
                 static_cast<long long>(o_.workers), limits.c_str(),
                 o_.fair_by_tokens ? ", clients share tokens" : "",
                 o_.journal.empty() ? "" : (", journal " + o_.journal).c_str());
    constexpr std::size_t shown = 20;  // the rest are in the output file
    std::size_t n = 0;
    for (const auto& item : items_)
      if (const auto* bad = std::get_if<BadLine>(&item); bad && n++ < shown)
        std::fprintf(stderr, "laneq: %s: %s\n", o_.input.c_str(), bad->message.c_str());
    if (n > shown) std::fprintf(stderr, "laneq: ... and %zu more malformed lines\n", n - shown);
    started_at_ = steady::now();
  }

  // --- running ---

  void submit_all() {
    const bool durable = !o_.journal.empty();
    for (std::size_t i : to_submit_) {
      auto& line = std::get<BatchLine>(items_[i]);
      std::string id = line.custom_id;
      queue_->async_submit(
          std::move(line.request),
          {.priority = static_cast<Priority>(line.priority), .client = line.client, .durable = durable},
          [this, id = std::move(id)](std::error_code ec, Response r) {
            // Lines with a journal row are not submitted (count_lines), so a duplicate_id is a
            // result like any other: ignoring it would leave the run waiting for ever.
            if (ec == errc::shutting_down) return;  // never ran: the next run does it
            on_result(id, ec, r);
          });
    }
    to_submit_.clear();
  }

  void on_result(const std::string& id, std::error_code ec, const Response& r) {
    write_line(result_line(id, ec, r));
    meter_.add(steady::now(), r.usage.total());
    // Each id counts once, so done never passes total (a second report is not expected: it is
    // written, as the later outcome, but not counted again).
    if (!counted_.insert(id).second) return;
    std::optional<std::size_t> lane;
    if (const auto it = lane_by_id_.find(id); it != lane_by_id_.end()) lane = it->second;
    else if (!open_ids_.contains(id)) ++state_.total;  // not expected: counted as it comes
    count_done(lane, !ec);
    maybe_finish();
  }

  void count_done(std::optional<std::size_t> lane, bool ok) {
    ++state_.done;
    ok ? ++state_.ok : ++state_.failed;
    if (lane) {
      ++lanes_[*lane].done;
      ok ? ++lanes_[*lane].ok : ++lanes_[*lane].failed;
    }
  }

  void write_line(const std::string& line) {
    // One write per line, flushed: a reader (or a crash) sees whole lines as they finish.
    if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() || std::fputc('\n', out_) == EOF ||
        std::fflush(out_) != 0) {
      std::fprintf(stderr, "laneq: cannot write %s: %s\n", o_.output.c_str(), std::strerror(errno));
      ::_exit(2);  // results would be lost silently otherwise; the journal keeps them
    }
  }

  void maybe_finish() {
    if (finishing_ || interrupted_ || state_.done < state_.total) return;
    finishing_ = true;
    queue_->async_shutdown({.drain = true}, [this](std::error_code) { stopped(); });
  }

  // Once, though both shutdowns may complete (a signal during the final drain).
  void stopped() {
    if (stopped_) return;
    stopped_ = true;
    if (mock_) {
      mock_seen_ = mock_->stats();
      mock_->stop();
    }
    signals_->cancel();
    ticker_->cancel();
    show_progress(true);
  }

  // --- progress ---

  bool tty() const {
    if (o_.progress == "bar") return true;
    if (o_.progress == "auto") return ::isatty(STDERR_FILENO) == 1;
    return false;
  }

  void tick() {
    show_progress(false);
    ticker_->expires_after(tty() ? std::chrono::milliseconds(200) : o_.progress_interval);
    ticker_->async_wait([this](std::error_code ec) {
      // stopped() cannot cancel a wait whose handler is already queued: without the check, the
      // ticker would re-arm for ever and io.run() never return.
      if (!ec && !stopped_) tick();
    });
  }

  void show_progress(bool last) {
    if (o_.progress == "none") return;
    const auto now = steady::now();
    ProgressState s = state_;
    s.lanes.clear();
    for (const auto& l : lanes_)
      if (l.total > 0) s.lanes.push_back({l.name, l.total, l.done, l.ok, l.failed});
    s.requests_per_s = meter_.per_second(now);
    s.tokens_per_min = meter_.tokens_last_minute(now);
    s.rpm_limit = o_.rpm;
    s.tpm_limit = o_.tpm;
    s.rate_limited = queue_->metrics().total.rate_limited;
    s.eta_s = meter_.eta_s(now, lines_left(state_));
    if (tty()) {
      std::fprintf(stderr, "\r\033[K%s%s", render_bar(s, terminal_width()).c_str(), last ? "\n" : "");
    } else if (!last || state_.done > 0) {
      std::fprintf(stderr, "%s\n", render_plain(s, now - started_at_).c_str());
    }
    std::fflush(stderr);
  }

  // The terminal's own width (shells rarely export COLUMNS): a bar wider than the terminal
  // wraps, and each redraw then clears only its last row.
  static std::size_t terminal_width() {
    if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0)
      return static_cast<std::size_t>(std::atoi(c));
    winsize ws{};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 120;  // render_bar cuts its line to the width, however narrow
  }

  // --- the end ---

  int report() {
    const auto m = queue_->metrics();
    std::vector<LaneSummary> rows;
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      const auto& l = lanes_[i];
      if (l.total == 0) continue;
      LaneSummary row{.name = l.name, .count = l.total, .ok = l.ok, .failed = l.failed,
                      .earlier = l.earlier};
      for (const auto& ml : m.lanes)
        if (ml.name == l.name) {
          row.wait_p50_ms = ml.stats.queue_wait.p50_ms;
          row.wait_p99_ms = ml.stats.queue_wait.p99_ms;
        }
      rows.push_back(row);
    }
    std::fprintf(stderr, "\n%s", render_summary(rows).c_str());
    if (bad_ > 0) std::fprintf(stderr, "%zu malformed line(s): see their error lines in %s\n", bad_, o_.output.c_str());
    const double secs = std::chrono::duration<double>(steady::now() - started_at_).count();
    std::fprintf(stderr, "laneq: %zu of %zu lines succeeded, %zu failed, in %s; 429/503/529 answers: %llu; output: %s\n",
                 state_.ok, state_.total, state_.failed, format_duration(secs).c_str(),
                 static_cast<unsigned long long>(m.total.rate_limited), o_.output.c_str());
    if (!mock_seen_.is_null())
      std::fprintf(stderr,
                   "mock API server: %s calls, at most %s started in any 1 s and %s in any 60 s, "
                   "429s sent: %s\n",
                   mock_seen_["requests"].dump().c_str(), mock_seen_["max_in_1s"].dump().c_str(),
                   mock_seen_["max_in_60s"].dump().c_str(), mock_seen_["sent_429"].dump().c_str());
    int code = run_exit_code(state_, interrupted_);
    // The mock enforces the limits laneq was given: a 429 from it means laneq overran them
    // (or the mock counts stricter, e.g. in slices without --smooth), retried or not.
    if (const auto sent = mock_seen_.is_object() ? mock_seen_.value("sent_429", 0) : 0;
        sent > 0) {
      std::fprintf(stderr, "laneq: the mock API server answered %d call(s) with 429: these "
                           "settings overran the limits it enforces%s\n", sent,
                   code == 130 ? "" : " (exit 1)");
      if (code == 0) code = 1;
    }
    if (code == 130)
      std::fprintf(stderr, "laneq: interrupted with %zu line(s) not run; %s\n",
                   lines_left(state_),
                   o_.journal.empty() ? "run with --journal to be able to resume"
                                      : "run the same command again to resume");
    return code;
  }

  struct LaneCount {
    std::string name;
    int priority = 0;
    std::size_t total = 0, done = 0, ok = 0, failed = 0, earlier = 0;
  };

  const RunOptions& o_;
  std::vector<std::variant<BatchLine, BadLine>> items_;
  std::vector<std::size_t> to_submit_;
  std::unordered_map<std::string, std::size_t> lane_by_id_;
  std::unordered_set<std::string> open_ids_;  // the journal's open rows at the start (resume)
  std::unordered_set<std::string> counted_;   // ids counted done (this run or an earlier one)
  std::vector<LaneCount> lanes_;
  EarlierOutput earlier_;
  ProgressState state_;
  RateMeter meter_;
  std::size_t bad_ = 0, earlier_count_ = 0;
  std::size_t recovered_count_ = 0;  // lines whose open journal row recovery runs
  std::FILE* out_ = nullptr;
  RequestQueue* queue_ = nullptr;
  asio::signal_set* signals_ = nullptr;
  asio::steady_timer* ticker_ = nullptr;
  std::optional<mock::MockServer> mock_;
  nlohmann::json mock_seen_;
  steady::time_point started_at_ = steady::now();
  bool interrupted_ = false;
  bool finishing_ = false;
  bool stopped_ = false;
};

}  // namespace

int run_batch(const RunOptions& options) {
  try {
    check_output_path(options);
    BatchRun run(options);
    return run.run();
  } catch (const setup_error& e) {
    std::fprintf(stderr, "laneq: %s\n", e.message.c_str());
    return 2;
  }
}

}  // namespace laneq::cli
