// The laneq CLI as a user runs it: a real process against the mock API server on 127.0.0.1,
// with real files. Bad lines, exit codes, clear set-up errors, progress lines, a journal that
// resumes, SIGTERM, and a kill -9 crash test.
#include <catch2/catch.hpp>

#include <cerrno>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "laneq/laneq.hpp"
#include "support/child_process.hpp"
#include "support/http_client.hpp"

using namespace std::chrono_literals;
using laneq::test::ChildProcess;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed after.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("laneq-cli-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

json chat_line(const std::string& id, const std::string& priority = "normal") {
  return {{"custom_id", id},
          {"method", "POST"},
          {"url", "/v1/chat/completions"},
          {"priority", priority},
          {"body",
           {{"model", "gpt-test"},
            {"max_tokens", 16},
            {"messages", {{{"role", "user"}, {"content", "hello " + id}}}}}}};
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << '\n';
}

std::vector<std::string> good_lines(int n, const std::string& prefix = "req-") {
  std::vector<std::string> lines;
  const char* lanes[] = {"background", "low", "normal", "high", "critical"};
  for (int i = 0; i < n; ++i) lines.push_back(chat_line(prefix + std::to_string(i), lanes[i % 5]).dump());
  return lines;
}

std::vector<json> read_output(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));  // every line whole JSON
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  return static_cast<std::size_t>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
}

// Reads the CLI's plain progress lines ("... 150/300 done ...") until at least `n` are done;
// false if it ended or fell silent first. Blocks on the pipe: no polling.
bool wait_done(laneq::test::ChildProcess& p, std::size_t n) {
  const std::regex done_re(R"((\d+)/(\d+) done)");
  for (;;) {
    const std::string line = p.read_stderr(true, 30s);
    if (line.empty()) return false;
    std::smatch m;
    if (std::regex_search(line, m, done_re) && std::stoul(m[1]) >= n) return true;
  }
}

// custom_id -> how many output lines carry it.
std::map<std::string, int> ids_in(const std::vector<json>& out) {
  std::map<std::string, int> ids;
  for (const auto& l : out)
    if (l["custom_id"].is_string()) ++ids[l["custom_id"].get<std::string>()];
  return ids;
}

struct Run {
  int code;
  std::string err;
};

// A journal row as a run that ended before the request ran leaves it: pending.
void append_pending_row(const std::string& path, const std::string& id, int max_tokens) {
  auto journal = laneq::Journal::open({path});
  laneq::JournalRecord rec;
  rec.id = id;
  rec.priority = static_cast<int>(laneq::Priority::normal);
  rec.request.id = id;
  rec.request.model = "gpt-test";
  rec.request.messages.push_back({"user", "hello " + id});
  rec.request.max_tokens = max_tokens;
  rec.enqueued_at = std::chrono::system_clock::now();
  std::promise<std::error_code> appended;
  journal->append(std::move(rec),
                  [&appended](std::error_code ec, std::int64_t) { appended.set_value(ec); });
  REQUIRE_FALSE(appended.get_future().get());
}

// No API keys from the developer's shell: the tests never reach a real API.
const std::vector<std::string> clean_env = {"OPENAI_API_KEY=", "ANTHROPIC_API_KEY=",
                                            "OPENAI_BASE_URL=", "ANTHROPIC_BASE_URL="};

// What a run against the mock process needs: the mock checks that a key is sent.
const std::vector<std::string> mock_env = {"OPENAI_API_KEY=sk-test", "ANTHROPIC_API_KEY=",
                                           "OPENAI_BASE_URL=", "ANTHROPIC_BASE_URL="};

Run run_cli(std::vector<std::string> args, const std::vector<std::string>& env = clean_env,
            std::chrono::seconds limit = 120s) {
  ChildProcess p(LANEQ_CLI_EXE, std::move(args), env);
  std::string err = p.read_stderr(false, limit);  // to EOF: the program ended
  return {p.exit_code(10s), err};
}

// laneq-mock-api as its own process, so a kill -9 of the CLI leaves it (and its /stats) alone.
struct MockProcess {
  ChildProcess proc;
  unsigned short port = 0;
  explicit MockProcess(std::vector<std::string> args) : proc(LANEQ_MOCK_API_EXE, std::move(args)) {
    const auto line = proc.read_stdout(true, 10s);
    const auto colon = line.rfind(':');
    REQUIRE(colon != std::string::npos);
    port = static_cast<unsigned short>(std::stoi(line.substr(colon + 1)));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  json stats() const { return laneq::test::HttpClient(port).request("GET", "/stats").json(); }
};

}  // namespace

TEST_CASE("laneq run writes one output line per input line - bad lines with their line numbers",
          "[cli]") {
  TempDir dir;
  auto lines = good_lines(6);
  lines.insert(lines.begin() + 2, "{this is not json");
  lines.push_back(R"({"url":"/v1/chat/completions","body":{}})");                   // no custom_id
  lines.push_back(chat_line("req-1").dump());                                        // duplicate
  lines.push_back(R"({"custom_id":"emb","url":"/v1/embeddings","body":{}})");       // unknown url
  lines.push_back("");                                                               // blank: skipped
  write_lines(dir.file("in.jsonl"), lines);

  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--mock",
                          "--mock-latency-ms", "2", "--progress", "none"});
  CHECK(r.code == 1);  // not every line succeeded
  const auto out = read_output(dir.file("out.jsonl"));
  REQUIRE(out.size() == 10);
  const auto ids = ids_in(out);
  for (int i = 0; i < 6; ++i) CHECK(ids.at("req-" + std::to_string(i)) == 1);  // each exactly once
  std::map<int, std::string> bad;
  for (const auto& l : out) {
    if (l.contains("line")) {
      bad[l["line"].get<int>()] = l["error"]["code"].get<std::string>();
      CHECK(l["response"].is_null());
    } else {
      CHECK(l["error"].is_null());
      CHECK(l["response"]["status_code"] == 200);
      CHECK(l["response"]["body"]["object"] == "chat.completion");
      CHECK(l["id"].get<std::string>().rfind("batch_req_", 0) == 0);
    }
  }
  CHECK(bad == std::map<int, std::string>{{3, "invalid_json"},
                                          {8, "missing_custom_id"},
                                          {9, "duplicate_custom_id"},
                                          {10, "unknown_url"}});
  CHECK(r.err.find("4 malformed line(s)") != std::string::npos);
  CHECK(r.err.find("in.jsonl: line 3: not valid JSON") != std::string::npos);
  CHECK(r.err.find("line 9: custom_id \"req-1\" is already used on line 2") != std::string::npos);
  CHECK(r.err.find("6 of 10 lines succeeded, 4 failed") != std::string::npos);
}

TEST_CASE("laneq run --fair-share tokens: clients of a lane share its tokens, not its lines",
          "[cli]") {
  TempDir dir;
  std::vector<std::string> lines;
  const auto line = [&](const std::string& id, const std::string& client, int max_tokens) {
    json l = chat_line(id);
    l["client"] = client;
    l["body"]["max_tokens"] = max_tokens;
    lines.push_back(l.dump());
  };
  for (int i = 0; i < 4; ++i) line("big-" + std::to_string(i), "big", 2000);
  // More small tokens than the big lines have (~28 x 400 against ~2,010 x 4): small lines
  // are still queued when the third big one goes, however the first ones were admitted.
  for (int i = 0; i < 400; ++i) line("small-" + std::to_string(i), "small", 16);
  write_lines(dir.file("in.jsonl"), lines);
  // One worker: the output's order is the order of the calls. Small lines between the second
  // and third big ones: 1 when clients take turns by lines, dozens when by tokens.
  const auto smalls_between_bigs = [&](std::vector<std::string> extra) {
    std::vector<std::string> cmd = {"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"),
                                    "--mock", "--mock-latency-ms", "0", "--workers", "1",
                                    "--progress", "none"};
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    const auto r = run_cli(cmd);
    CHECK(r.code == 0);
    int bigs = 0, smalls = 0;
    for (const auto& o : read_output(dir.file("out.jsonl"))) {
      const bool big = o["custom_id"].get<std::string>().rfind("big-", 0) == 0;
      bigs += big;
      if (bigs == 3) break;
      smalls += !big && bigs == 2;
    }
    CHECK(bigs == 3);
    return std::pair{smalls, r.err};
  };
  const auto [by_lines, err_lines] = smalls_between_bigs({});
  CHECK(by_lines == 1);
  const auto [by_tokens, err_tokens] = smalls_between_bigs({"--fair-share", "tokens"});
  CHECK(by_tokens >= 30);  // ~2,000 tokens of ~30-token lines; exact in the queue's own test
  CHECK(err_tokens.find("clients share tokens") != std::string::npos);
  const auto bad = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"),
                            "--fair-share", "bytes"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("lines or tokens") != std::string::npos);
}

TEST_CASE("laneq run exits 0 when every line succeeded and prints a summary per lane", "[cli]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(25));
  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--mock",
                          "--mock-latency-ms", "2", "--rpm", "6000", "--progress", "plain",
                          "--progress-interval", "0.05"});
  CHECK(r.code == 0);
  CHECK(read_output(dir.file("out.jsonl")).size() == 25);
  CHECK(r.err.find("laneq: 25 lines from") != std::string::npos);
  CHECK(r.err.find("done (") != std::string::npos);  // a plain progress line
  for (const char* lane : {"critical", "high", "normal", "low", "background"})
    CHECK(r.err.find(std::string("\n") + lane) != std::string::npos);  // summary rows
  CHECK(r.err.find("25 of 25 lines succeeded, 0 failed") != std::string::npos);
  CHECK(r.err.find("429s sent: 0") != std::string::npos);  // the mock enforced the same limit
}

TEST_CASE("with --mock, a 429 from the mock makes the exit code 1: the settings overran the "
          "limits it enforces - a burst into a limit enforced in 1 s slices, not a smooth run",
          "[cli]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(40));
  const std::vector<std::string> base = {"run", dir.file("in.jsonl"), "--out",
                                         dir.file("out.jsonl"), "--mock", "--mock-latency-ms",
                                         "5", "--rpm", "600", "--mock-rpm-slice-ms", "1000",
                                         "--progress", "none"};
  auto smooth = base;
  smooth.push_back("--smooth");
  const auto ok = run_cli(smooth);
  CHECK(ok.code == 0);
  CHECK(ok.err.find("40 of 40 lines succeeded") != std::string::npos);
  CHECK(ok.err.find("429s sent: 0") != std::string::npos);
  // 8 workers at once against 10 per second (a 429 unless 40 calls took ~3 s, even slowed)
  const auto burst = run_cli(base);
  CHECK(burst.code == 1);
  CHECK_THAT(burst.err, Catch::Contains("answered") &&
                            Catch::Contains("with 429: these settings overran the limits"));
}

TEST_CASE("laneq run says clearly what is missing - exit code 2", "[cli]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(2));
  auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl")});
  CHECK(r.code == 2);
  CHECK(r.err.find("OPENAI_API_KEY") != std::string::npos);
  CHECK(r.err.find("--mock") != std::string::npos);
  r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--provider",
               "anthropic"});
  CHECK(r.code == 2);
  CHECK(r.err.find("ANTHROPIC_API_KEY") != std::string::npos);
  r = run_cli({"run", dir.file("missing.jsonl"), "--out", dir.file("out.jsonl"), "--mock"});
  CHECK(r.code == 2);
  CHECK(r.err.find("cannot read") != std::string::npos);
  r = run_cli({"run", dir.file("in.jsonl"), "--mock"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--out is required") != std::string::npos);
  r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("o"), "--rpm", "lots"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--rpm") != std::string::npos);
  r = run_cli({"bogus"});
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown command") != std::string::npos);
  std::ofstream(dir.file("garbage.db")) << "this is not a database, not at all, really";
  r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--mock", "--journal",
               dir.file("garbage.db")});
  CHECK(r.code == 2);
  CHECK(r.err.find("garbage.db") != std::string::npos);
  r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("in.jsonl"), "--mock"});
  CHECK(r.code == 2);
  CHECK(r.err.find("is the input file") != std::string::npos);
  CHECK(count_lines(dir.file("in.jsonl")) == 2);  // not truncated
  // flags that would be quietly changed, ignored, or taken as another flag's value
  const auto refused = [&](std::vector<std::string> flags, const std::string& says) {
    std::vector<std::string> args = {"run", dir.file("in.jsonl")};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto res = run_cli(args, mock_env);
    CHECK(res.code == 2);
    CHECK_THAT(res.err, Catch::Contains(says));
  };
  refused({"--out", "--mock"}, "--out: needs a value, not the flag --mock");
  refused({"--out", dir.file("o"), "--mock", "--workers", "2", "--reserved-workers", "2"},
          "--reserved-workers must be below --workers");
  refused({"--out", dir.file("o"), "--mock", "--base-url", "http://127.0.0.1:9"},
          "--mock and --base-url exclude each other");
  refused({"--out", dir.file("o"), "--mock-latency-ms", "5"}, "--mock-latency-ms needs --mock");
  refused({"--out", dir.file("o"), "--mock-rpm-slice-ms", "5"},
          "--mock-rpm-slice-ms needs --mock");
  refused({"--out", dir.file("o"), "--mock", "--mock-rpm-slice-ms", "1000"},
          "--mock-rpm-slice-ms needs --rpm");  // (it would slice nothing, without a word)
  refused({"--out", dir.file("o"), "--base-url", "127.0.0.1:9"}, "must start with http://");
  // empty reads as "not given": no journal, or the default (paid) endpoint
  refused({"--out", dir.file("o"), "--mock", "--journal", ""},
          "--journal: needs a non-empty file name");
  refused({"--out", dir.file("o"), "--base-url="}, "--base-url: needs a non-empty URL");
  CHECK_FALSE(fs::exists(dir.file("o")));
  // A resume reads --out back: a FIFO (or a pipe, a terminal) would block that read for ever.
  const std::string fifo = dir.file("out.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto piped = run_cli({"run", dir.file("in.jsonl"), "--out", fifo, "--mock", "--journal",
                              dir.file("fifo.db")}, mock_env, 30s);
  CHECK(piped.code == 2);
  CHECK_THAT(piped.err, Catch::Contains("is not a regular file"));
  CHECK_FALSE(fs::exists("--mock"));
  fs::remove("--mock");  // (left by a regression: not in the build directory for the next run)
  // a bad URL is not a missing key: no key hint
  const auto url = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("o"), "--base-url",
                            "127.0.0.1:9"}, mock_env);
  CHECK(url.err.find("OPENAI_API_KEY") == std::string::npos);
}

// In the ASan+UBSan build, UBSan stops the run inside Asio 1.22 itself: a signal_set made with
// no descriptor left reports an invalid vptr in asio/detail/impl/signal_set_service.ipp (seen at
// ulimit -n 12 and 13). Asio's edge, not laneq's handling, which the plain and TSan builds
// check: hidden there ("[.]"), so CTest does not register it rather than report a pass.
#if defined(__SANITIZE_ADDRESS__)
#define LANEQ_NOT_UNDER_UBSAN "[.]"
#else
#define LANEQ_NOT_UNDER_UBSAN ""
#endif
TEST_CASE("laneq run exits 2 with one line naming the set-up step that failed, never aborting, "
          "when it runs out of file descriptors",
          "[cli]" LANEQ_NOT_UNDER_UBSAN) {
  // No flag makes the mock server's constructor (its socket) or the transport's fail, but a low
  // limit on open files does. Under `ulimit -n N` for growing N each run gets one step further
  // (the event loop's reactor, the mock's socket, the output file, the signal pipe) until one
  // has enough. The input is empty, so a run that gets through set-up ends at once with 0.
  TempDir dir;
  write_lines(dir.file("in.jsonl"), {});
  const auto& env = clean_env;
  int setup_failures = 0;
  bool got_through = false;
  for (int limit = 4; limit <= 256 && !got_through; ++limit) {
    ChildProcess p("/bin/sh",
                   {"-c", "ulimit -n \"$1\" && shift && exec \"$@\"", "sh", std::to_string(limit),
                    LANEQ_CLI_EXE, "run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"),
                    "--mock", "--progress", "none"},
                   env);
    const std::string err = p.read_stderr(false, 60s);
    const int code = p.exit_code(10s);
    INFO("ulimit -n " << limit << ": exit code " << code << ", stderr:\n" << err);
    REQUIRE(code >= 0);  // not ended by a signal: an exception reaching std::terminate aborts
    if (code == 0) {
      got_through = true;
    } else if (code == 2) {
      ++setup_failures;
      REQUIRE(!err.empty());
      const auto last_start = err.find_last_of('\n', err.size() - 2);  // the last line
      const std::string last = err.substr(last_start == std::string::npos ? 0 : last_start + 1);
      CHECK_THAT(last, Catch::StartsWith("laneq: cannot "));
    } else {
      // Ended before laneq's main (the dynamic loader, a sanitizer's runtime): no line of laneq's.
      CHECK(err.rfind("laneq: ", 0) != 0);
      CHECK(err.find("\nlaneq: ") == std::string::npos);
    }
  }
  CHECK(setup_failures > 0);
  CHECK(got_through);
}

TEST_CASE("input lines with fields of the wrong type, or a bad line reusing a custom_id, are "
          "bad lines - the run goes on and every custom_id is in the output once",
          "[cli]") {
  TempDir dir;
  auto lines = good_lines(2);
  lines.push_back(R"({"custom_id":"m","method":1,"url":"/v1/chat/completions","body":{}})");
  lines.push_back(R"({"custom_id":"req-0","url":"/v1/embeddings","body":{}})");  // req-0 again
  lines.push_back(R"({"custom_id":"t","url":"/v1/chat/completions","body":{"model":"m",)"
                  R"("messages":[{"role":"user","content":[{"type":5,"text":"x"}]}]}})");
  write_lines(dir.file("in.jsonl"), lines);
  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--mock",
                          "--mock-latency-ms", "1", "--progress", "none"});
  CHECK(r.code == 1);
  const auto out = read_output(dir.file("out.jsonl"));
  REQUIRE(out.size() == 5);
  const auto ids = ids_in(out);
  CHECK(ids == std::map<std::string, int>{{"req-0", 1}, {"req-1", 1}, {"m", 1}, {"t", 1}});
  CHECK(r.err.find("2 of 5 lines succeeded, 3 failed") != std::string::npos);
}

TEST_CASE("the CLI's timeout flag bounds each call attempt: a call slower than it fails as a "
          "network error",
          "[cli]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(1));
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--mock",
                          "--mock-latency-ms", "20000", "--timeout", "1", "--max-attempts", "1",
                          "--progress", "none"});
  CHECK(r.code == 1);
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);  // not the mock's 20 s
  const auto out = read_output(dir.file("out.jsonl"));
  REQUIRE(out.size() == 1);
  CHECK(out[0]["error"]["code"] == "network");
}

// A journaled run of 3 lines that finished, then half a line appended to its output (a crash
// mid-write). Returns the run's command line.
static std::vector<std::string> finished_run_then_torn_line(TempDir& dir) {
  write_lines(dir.file("in.jsonl"), good_lines(3));
  const std::vector<std::string> run = {"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"),
                                        "--journal", dir.file("run.db"), "--mock",
                                        "--mock-latency-ms", "1", "--progress", "none"};
  REQUIRE(run_cli(run).code == 0);
  REQUIRE(count_lines(dir.file("out.jsonl")) == 3);
  std::ofstream(dir.file("out.jsonl"), std::ios::app) << R"({"id":"batch_req_x","custom)";
  return run;
}

TEST_CASE("a resume refuses an output file it cannot trust, and cuts only a torn last line",
          "[cli][journal]") {
  TempDir dir;
  const auto run = finished_run_then_torn_line(dir);
  CHECK(run_cli(run).code == 0);
  CHECK(read_output(dir.file("out.jsonl")).size() == 3);  // cut, nothing run again
  // a whole line that is not ours, in the middle: refused, the file left as it is
  std::vector<std::string> kept;
  {
    std::ifstream in(dir.file("out.jsonl"));
    for (std::string l; std::getline(in, l);) kept.push_back(l);
  }
  kept.insert(kept.begin() + 1, "{\"note\":\"edited by hand\"}");
  write_lines(dir.file("out.jsonl"), kept);
  auto r = run_cli(run);
  CHECK(r.code == 2);
  CHECK(r.err.find("out.jsonl: line 2 is not a result line") != std::string::npos);
  CHECK(count_lines(dir.file("out.jsonl")) == 4);
  // a line refused before it was journaled (its cost exceeds --tpm): its error line is ours,
  // and a resume keeps it
  {
    auto big = chat_line("big");
    big["body"]["max_tokens"] = 50000;
    write_lines(dir.file("in2.jsonl"), {chat_line("small").dump(), big.dump()});
    std::vector<std::string> run2 = {"run", dir.file("in2.jsonl"), "--out", dir.file("out2.jsonl"),
                                     "--journal", dir.file("run2.db"), "--mock", "--tpm", "10000",
                                     "--mock-latency-ms", "1", "--progress", "none"};
    CHECK(run_cli(run2).code == 1);
    const auto again = run_cli(run2);
    CHECK(again.code == 1);  // not 2: the output is this journal's run
    CHECK(read_output(dir.file("out2.jsonl")).size() == 2);
  }
  // another run's results with a fresh journal: refused, not skipped
  kept.erase(kept.begin() + 1);
  write_lines(dir.file("out.jsonl"), kept);
  auto fresh = run;
  fresh[5] = dir.file("other.db");
  r = run_cli(fresh);
  CHECK(r.code == 2);
  CHECK(r.err.find("that the journal") != std::string::npos);
  CHECK(r.err.find("from another run") != std::string::npos);
}

TEST_CASE("a resume with a new journal refuses failure lines of calls another run made, and "
          "keeps none of them unsent", "[cli][journal]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(2));
  // No journal, a port nothing listens on: both lines fail with network, after a call.
  auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--base-url",
                    "http://127.0.0.1:9", "--max-attempts", "1", "--progress", "none"},
                   mock_env);
  REQUIRE(r.code == 1);
  const auto failed = read_output(dir.file("out.jsonl"));
  REQUIRE(failed.size() == 2);
  CHECK(failed[0]["error"]["code"] == "network");
  // The same output with a fresh journal: not "2 done in an earlier run, 0 to run".
  MockProcess mock({"--latency-ms", "1"});
  r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--base-url",
               mock.url(), "--journal", dir.file("new.db"), "--progress", "none"},
              mock_env);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("from another run"));
  CHECK(read_output(dir.file("out.jsonl")).size() == 2);  // left as it was
  CHECK(mock.stats()["requests"] == 0);
}

TEST_CASE("the start line shows the base URL without its query or user:password - no key in a "
          "CI log",
          "[cli]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(1));
  // A port nothing listens on: the line fails with network after one call.
  const std::string url = "http://user:SECRETPW@127.0.0.1:9/v1?key=SECRETKEY";
  auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("o1"), "--base-url", url,
                    "--max-attempts", "1", "--progress", "none"}, mock_env);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("openai at http://127.0.0.1:9/v1, "));
  auto env = mock_env;
  env.push_back("OPENAI_BASE_URL=" + url);
  auto e = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("o2"), "--max-attempts", "1",
                    "--progress", "none"}, env);
  INFO(e.err);
  CHECK(e.code == 1);
  CHECK_THAT(e.err, Catch::Contains("openai at http://127.0.0.1:9/v1 ($OPENAI_BASE_URL)"));
  for (const auto& text : {r.err, e.err, read_bytes(dir.file("o1")), read_bytes(dir.file("o2"))})
    for (const char* secret : {"SECRETPW", "SECRETKEY"})
      CHECK(text.find(secret) == std::string::npos);
}

TEST_CASE("a SIGINT the process was started with ignored stays ignored for the whole run",
          "[cli]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(4));
  // `laneq run ... &` from a script: the shell starts it with SIGINT ignored.
  ChildProcess p("/bin/sh",
                 {"-c", "trap '' INT; exec \"$0\" \"$@\"", LANEQ_CLI_EXE, "run",
                  dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--mock",
                  "--mock-latency-ms", "300", "--workers", "1", "--progress", "plain",
                  "--progress-interval", "0.05"},
                 clean_env);
  REQUIRE(wait_done(p, 1));
  p.signal(SIGINT);  // a Ctrl-C meant for the foreground job
  const std::string err = p.read_stderr(false, 60s);
  CHECK(p.exit_code(10s) == 0);
  CHECK(err.find("stopping") == std::string::npos);
  CHECK(read_output(dir.file("out.jsonl")).size() == 4);
}

TEST_CASE("with a journal, running the same command again sends nothing twice", "[cli][journal]") {
  TempDir dir;
  MockProcess mock({"--latency-ms", "1"});
  write_lines(dir.file("in.jsonl"), good_lines(40));
  const std::vector<std::string> cmd = {"run",       dir.file("in.jsonl"), "--out",
                                        dir.file("out.jsonl"), "--base-url", mock.url(),
                                        "--journal", dir.file("run.db"), "--progress", "none"};
  auto r = run_cli(cmd, mock_env);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(mock.stats()["requests"] == 40);
  r = run_cli(cmd, mock_env);
  CHECK(r.code == 0);
  CHECK(r.err.find("40 done in an earlier run, 0 to run") != std::string::npos);
  CHECK(mock.stats()["requests"] == 40);  // nothing sent again
  const auto ids = ids_in(read_output(dir.file("out.jsonl")));
  CHECK(ids.size() == 40);
  for (const auto& [id, n] : ids) CHECK(n == 1);
}

TEST_CASE("an output pipe whose reader is gone fails the run with exit 2 and its reason, not "
          "SIGPIPE",
          "[cli]") {
  // `--out /dev/stdout | head`: the process was killed by SIGPIPE (exit 141), no word said
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(2000));  // ~600 KB: more than a pipe holds
  ChildProcess p(LANEQ_CLI_EXE,
                 {"run", dir.file("in.jsonl"), "--out", "/dev/stdout", "--mock",
                  "--mock-latency-ms", "0", "--progress", "none"},
                 clean_env);
  REQUIRE_FALSE(p.read_stdout(true, 30s).empty());  // answers are coming
  // The reader goes: the pipe's read end becomes /dev/null (the fd stays ChildProcess's).
  const int null_fd = ::open("/dev/null", O_RDONLY);
  REQUIRE(null_fd >= 0);
  REQUIRE(::dup2(null_fd, p.stdout_fd()) >= 0);
  ::close(null_fd);
  const std::string err = p.read_stderr(false, 60s);
  INFO(err);
  CHECK(p.exit_code(10s) == 2);
  CHECK_THAT(err, Catch::Contains("cannot write /dev/stdout"));
}

TEST_CASE("SIGTERM stops admission, finishes in-flight calls, and the next run completes the file",
          "[cli][journal]") {
  TempDir dir;
  MockProcess mock({"--latency-ms", "100"});
  write_lines(dir.file("in.jsonl"), good_lines(60));
  const std::vector<std::string> cmd = {"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"),
                                        "--base-url", mock.url(), "--journal", dir.file("run.db"),
                                        "--workers", "4", "--progress", "plain",
                                        "--progress-interval", "0.05"};
  {
    ChildProcess p(LANEQ_CLI_EXE, cmd, mock_env);
    REQUIRE(wait_done(p, 8));
    p.signal(SIGTERM);
    const std::string err = p.read_stderr(false, 60s);
    CHECK(p.exit_code(10s) == 130);
    CHECK(err.find("run the same command again to resume") != std::string::npos);
  }
  const auto partial = read_output(dir.file("out.jsonl"));  // whole lines only
  CHECK(partial.size() < 60);
  for (const auto& l : partial) CHECK(l["error"].is_null());  // in-flight calls finished, not cut
  const auto sent_before = mock.stats()["requests"].get<int>();
  CHECK(static_cast<std::size_t>(sent_before) == partial.size());

  const auto r = run_cli(cmd, mock_env);
  CHECK(r.code == 0);
  const auto ids = ids_in(read_output(dir.file("out.jsonl")));
  CHECK(ids.size() == 60);
  for (const auto& [id, n] : ids) CHECK(n == 1);
  CHECK(mock.stats()["requests"] == 60);  // nothing sent twice
}

TEST_CASE("a SIGTERM while laneq run still reads its input ends it at once - exit 130, nothing "
          "sent, and the next run completes the file", "[cli][journal]") {
  TempDir dir;
  MockProcess mock({});
  const std::string fifo = dir.file("in.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::vector<std::string> cmd = {"run", fifo, "--out", dir.file("out.jsonl"), "--base-url",
                                  mock.url(), "--journal", dir.file("run.db"), "--progress",
                                  "none"};
  {
    ChildProcess p(LANEQ_CLI_EXE, cmd, mock_env);
    // Opening a FIFO to write succeeds once the reader has opened it (ENXIO until then): the
    // CLI is in set-up, blocked reading its input, when the signal comes. The FIFO stays open
    // (no EOF) until the CLI has ended: only the signal can end that read.
    int fd = -1;
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while ((fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK)) < 0) {
      REQUIRE(errno == ENXIO);
      REQUIRE(std::chrono::steady_clock::now() < give_up);
      REQUIRE_FALSE(p.wait(5ms).has_value());  // the CLI must not end before it reads
    }
    p.signal(SIGTERM);
    const std::string err = p.read_stderr(false, 60s);
    const int code = p.exit_code(10s);
    ::close(fd);
    CHECK(code == 130);  // -15 would mean the set-up handler was not there
    CHECK(err.find("interrupted during set-up: nothing was sent") != std::string::npos);
  }
  CHECK(mock.stats()["requests"] == 0);
  write_lines(dir.file("in.jsonl"), good_lines(20));  // the same lines, from a file this time
  cmd[1] = dir.file("in.jsonl");
  const auto r = run_cli(cmd, mock_env);
  CHECK(r.code == 0);
  const auto ids = ids_in(read_output(dir.file("out.jsonl")));
  CHECK(ids.size() == 20);
  for (const auto& [id, n] : ids) CHECK(n == 1);
  CHECK(mock.stats()["requests"] == 20);
}

TEST_CASE("scripts/chaos: kill -9, SIGTERM and SIGINT at random moments of runs against a mock "
          "that injects every fault - every custom_id exactly once", "[cli][journal][chaos]") {
  ChildProcess p("/bin/bash", {LANEQ_SOURCE_DIR "/scripts/chaos", "--bin", LANEQ_CLI_EXE, "--runs",
                               "1", "--lines", "300", "--kills", "4", "--seed", "7"});
  const std::string out = p.read_stdout(false, 240s);  // to EOF: the script ended
  INFO(out << p.read_stderr(false, 1s));
  CHECK(p.exit_code(10s) == 0);
  CHECK(out.find("4 signals") != std::string::npos);
  CHECK(out.find("300 of 300 custom_ids, 0 twice, 0 torn lines") != std::string::npos);
  CHECK(out.find("\"broken_runs\":0") != std::string::npos);
}

namespace {
struct ChaosRun {
  std::string out, err;
  int exit_code;
};
// scripts/chaos, one run of 20 lines with no signals, on a stand-in for laneq: `mock` (a shell
// line: $1 is "mock") and `run` (shell lines: $2 the input, $4 the output).
ChaosRun chaos_with_fake(TempDir& dir, const std::string& mock, const std::string& run) {
  const std::string fake = dir.file("laneq");
  {
    std::ofstream f(fake);
    f << "#!/bin/bash\nif [ \"$1\" = mock ]; then " << mock << "; fi\n" << run;
  }
  fs::permissions(fake, fs::perms::owner_all);
  ChildProcess p("/bin/bash", {LANEQ_SOURCE_DIR "/scripts/chaos", "--bin", fake, "--runs", "1",
                               "--lines", "20", "--kills", "0"},
                 {"CHAOS_KEEP=" + dir.file("kept")});
  ChaosRun r;
  r.out = p.read_stdout(false, 60s);
  r.err = p.read_stderr(false, 1s);
  r.exit_code = p.exit_code(10s);
  return r;
}
// As the mock does: exit 0 on SIGTERM.
const std::string fake_mock_listens =
    "echo 'laneq-mock-api listening on 127.0.0.1:9'; trap 'exit 0' TERM; sleep 60 & wait";
// Each input line's custom_id once, answered.
const std::string fake_run_answers =
    "sed 's/.*\"custom_id\":\"\\([^\"]*\\)\".*/{\"id\":\"x\",\"custom_id\":\"\\1\",\"error\":null}/' \"$2\" > \"$4\"\n";
}  // namespace

TEST_CASE("scripts/chaos passes a run of its stand-in for laneq that keeps every invariant",
          "[cli][chaos]") {
  TempDir dir;  // (so the failing cases below fail by what each breaks, not by the stand-in)
  const auto r = chaos_with_fake(dir, fake_mock_listens, fake_run_answers);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("20 of 20 custom_ids, 0 twice, 0 torn lines, 0 lines failed") !=
        std::string::npos);
  CHECK(r.out.find("\"broken_runs\":0") != std::string::npos);
}

TEST_CASE("scripts/chaos fails a run whose output has a custom_id twice", "[cli][chaos]") {
  TempDir dir;
  const auto r =
      chaos_with_fake(dir, fake_mock_listens, fake_run_answers + "head -n 1 \"$4\" >> \"$4\"\n");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("20 of 20 custom_ids, 1 twice") != std::string::npos);
  CHECK(r.out.find("\"broken_runs\":1") != std::string::npos);
  CHECK(r.err.find("broke an invariant") != std::string::npos);
  CHECK(fs::exists(dir.file("kept")));
}

TEST_CASE("scripts/chaos fails a run whose mock crashed, or whose lines failed in bulk",
          "[cli][chaos]") {
  // Every custom_id once, yet nothing was served: a mock that crashed (its calls then all
  // fail, which exit 1 allows) or a laneq that fails every call.
  const std::string run_fails =
      "sed 's/.*\"custom_id\":\"\\([^\"]*\\)\".*/{\"custom_id\":\"\\1\",\"error\":{\"code\":\"network\"}}/' \"$2\" > \"$4\"; exit 1\n";
  const struct {
    const char* what;
    std::string mock, run, says;
  } cases[] = {
      {"the mock crashed", "echo 'laneq-mock-api listening on 127.0.0.1:9'; kill -SEGV $$",
       fake_run_answers, "the mock exited 139"},
      {"every line failed", fake_mock_listens, run_fails,
       "20 of 20 lines failed, more than a quarter"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    TempDir dir;
    const auto r = chaos_with_fake(dir, c.mock, c.run);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("20 of 20 custom_ids, 0 twice") != std::string::npos);
    CHECK(r.out.find("\"broken_runs\":1") != std::string::npos);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
}

TEST_CASE("a test's child process is killed with the processes it started (a test that gives "
          "up on scripts/chaos must not leave its mock server listening)", "[cli][chaos]") {
  int grandchild = -1;  // a pidfd: readable once that process has ended, whoever reaps it
  pid_t pid = 0;
  {
    ChildProcess p("/bin/bash", {"-c", "sleep 300 & echo $!; wait"});
    pid = std::stoi(p.read_stdout(true, 30s));
    grandchild = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    REQUIRE(grandchild >= 0);
  }  // destroyed while the script still waits
  pollfd ended{grandchild, POLLIN, 0};
  const bool gone = ::poll(&ended, 1, 30'000) == 1;
  CHECK(gone);
  if (!gone) ::kill(pid, SIGKILL);
  ::close(grandchild);
}

TEST_CASE("scripts/chaos refuses a bad flag with a message and exit 2, before it runs anything",
          "[cli][chaos]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--runs"}, "--runs needs a value"},
      {{"--runs", "x"}, "--runs takes a whole number, not 'x'"},
      {{"--seed", "08"}, "--seed takes a whole number, not '08'"},  // bash would read octal
      {{"--signals", "HUP"}, "--signals takes KILL, TERM and INT, not 'HUP'"},
      {{"--signals", ""}, "--signals names none"},
      {{"--lines", "0"}, "must be at least 1"},
      {{"--provider", "gemini"}, "--provider is openai or anthropic, not 'gemini'"},
      {{"--bogus", "1"}, "unknown flag --bogus"}};
  for (const auto& [args, message] : cases) {
    INFO(args.front() << " -> " << message);
    std::vector<std::string> argv = {LANEQ_SOURCE_DIR "/scripts/chaos", "--bin", "/bin/false"};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess p("/bin/bash", argv);
    const std::string err = p.read_stderr(false, 30s);
    INFO(err);
    CHECK(p.exit_code(10s) == 2);
    CHECK(err.find(message) != std::string::npos);
  }
  ChildProcess help("/bin/bash", {LANEQ_SOURCE_DIR "/scripts/chaos", "--help"});
  CHECK(help.read_stdout(false, 30s).find("scripts/chaos [--runs N]") != std::string::npos);
  CHECK(help.exit_code(10s) == 0);
}

TEST_CASE("kill -9 mid-run, run again: every custom_id exactly once, resends only what was in flight",
          "[cli][journal][crash]") {
  TempDir dir;
  constexpr int lines = 400, workers = 8;
  MockProcess mock({"--latency-ms", "20", "--jitter-ms", "10"});
  write_lines(dir.file("in.jsonl"), good_lines(lines));
  const std::vector<std::string> cmd = {
      "run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--base-url", mock.url(),
      "--journal", dir.file("run.db"), "--workers", std::to_string(workers), "--progress", "plain",
      "--progress-interval", "0.05"};
  {
    ChildProcess p(LANEQ_CLI_EXE, cmd, mock_env);
    REQUIRE(wait_done(p, lines / 4));
    p.signal(SIGKILL);
    CHECK(p.exit_code(10s) == -SIGKILL);
  }
  const auto killed_at = count_lines(dir.file("out.jsonl"));
  INFO("output lines at the kill: " << killed_at);
  std::set<std::string> done_at_kill;  // the lines whose outcome was written (a torn one is not)
  {
    std::ifstream in(dir.file("out.jsonl"));
    for (std::string line; std::getline(in, line);)
      if (const auto j = json::parse(line, nullptr, false); j.is_object() && j.contains("custom_id"))
        done_at_kill.insert(j["custom_id"].get<std::string>());
  }
  CHECK(killed_at < static_cast<std::size_t>(lines));  // it really died mid-run

  const auto r = run_cli(cmd, mock_env);
  INFO(r.err);
  CHECK(r.code == 0);
  const auto ids = ids_in(read_output(dir.file("out.jsonl")));
  CHECK(ids.size() == static_cast<std::size_t>(lines));
  for (const auto& [id, n] : ids) CHECK(n == 1);

  // The server saw each request once, and twice at most those the journal had not finished at
  // the kill: in flight (at most `workers`), or answered with the outcome's commit still to come
  // (a worker goes on meanwhile: a slow machine has more of those). None whose line was written.
  const auto stats = mock.stats();
  int twice = 0;
  for (const auto& [id, n] : stats["by_request_id"].items()) {
    CHECK(n.get<int>() <= 2);
    if (n.get<int>() != 2) continue;
    ++twice;
    INFO(id);
    CHECK_FALSE(done_at_kill.contains(id));
  }
  CHECK(stats["by_request_id"].size() == static_cast<std::size_t>(lines));
  CHECK(twice <= lines - static_cast<int>(done_at_kill.size()));
  CHECK(stats["requests"].get<int>() == lines + twice);
}

TEST_CASE("laneq run refuses an output file that is the journal or a file SQLite keeps beside "
          "it - exit code 2 before anything is opened",
          "[cli][journal]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(2));
  const auto in = dir.file("in.jsonl");
  // no journal yet, the same file spelled two ways: nothing is created
  auto r = run_cli({"run", in, "--out", (dir.path / "." / "j.db").string(), "--journal",
                    dir.file("j.db"), "--mock", "--progress", "none"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("name the same file"));
  CHECK_FALSE(fs::exists(dir.file("j.db")));

  // the journal of a finished run: the file itself, or its -wal / -shm companion
  const std::vector<std::string> run = {"run", in, "--out", dir.file("out.jsonl"), "--journal",
                                        dir.file("run.db"), "--mock", "--mock-latency-ms", "1",
                                        "--progress", "none"};
  REQUIRE(run_cli(run).code == 0);
  const auto journal_before = read_bytes(dir.file("run.db"));
  REQUIRE_FALSE(journal_before.empty());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {(dir.path / "." / "run.db").string(), "name the same file"},
      {dir.file("run.db-wal"), "a file SQLite keeps beside --journal"},
      {dir.file("run.db-shm"), "a file SQLite keeps beside --journal"}};
  for (const auto& [out, says] : refused) {
    INFO(out);
    auto args = run;
    args[3] = out;
    r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(says));
    CHECK_THAT(r.err, Catch::Contains("choose another --out"));
  }
  CHECK(read_bytes(dir.file("run.db")) == journal_before);
  CHECK_FALSE(fs::exists(dir.file("run.db-shm")));  // never created as an output file
  // the journal still serves its own run
  r = run_cli(run);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("2 done in an earlier run, 0 to run"));
}

TEST_CASE("a resume refused as another run's output leaves the file as it was - a torn last "
          "line included",
          "[cli][journal]") {
  TempDir dir;
  const auto run = finished_run_then_torn_line(dir);
  const auto before = read_bytes(dir.file("out.jsonl"));
  auto fresh = run;
  fresh[5] = dir.file("other.db");  // a journal that never ran these lines
  const auto r = run_cli(fresh);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("from another run"));
  CHECK(read_bytes(dir.file("out.jsonl")) == before);  // the torn line still there
  // the run the output belongs to cuts the torn line and has nothing left to do
  CHECK(run_cli(run).code == 0);
  CHECK(read_output(dir.file("out.jsonl")).size() == 3);
}

TEST_CASE("a journal from another input is refused, not read as this input's answers",
          "[cli][journal]") {
  // Matched by custom_id only, the second input's lines were all "done in an earlier run",
  // exit 0, with the first input's answers to other prompts.
  TempDir dir;
  write_lines(dir.file("in.jsonl"), good_lines(3));
  std::vector<std::string> args = {"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"),
                                   "--journal", dir.file("run.db"), "--mock",
                                   "--mock-latency-ms", "1", "--progress", "none"};
  REQUIRE(run_cli(args).code == 0);
  auto other = json::parse(good_lines(3)[1]);
  other["body"]["messages"][0]["content"] = "something else entirely";
  write_lines(dir.file("in2.jsonl"), {good_lines(3)[0], other.dump(), good_lines(3)[2]});
  args[1] = dir.file("in2.jsonl");
  args[3] = dir.file("out2.jsonl");
  const auto r = run_cli(args);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("line 2 (custom_id \"req-1\") is not the request"));
  // a line edited into one that cannot run: not an error line beside the journal's answer
  other["body"]["messages"][0]["name"] = "x";  // unsupported_content
  write_lines(dir.file("in2.jsonl"), {good_lines(3)[0], other.dump(), good_lines(3)[2]});
  const auto bad = run_cli(args);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("line 2 (custom_id \"req-1\") cannot run"));
  // a file that reuses a custom_id is the same file every run: its resume is not refused
  write_lines(dir.file("in3.jsonl"), {good_lines(3)[0], good_lines(3)[0]});
  args[1] = dir.file("in3.jsonl");
  args[3] = dir.file("out3.jsonl");
  args[5] = dir.file("run3.db");
  REQUIRE(run_cli(args).code == 1);  // (the duplicate is a bad line)
  CHECK(run_cli(args).code == 1);    // resumed: refused it would be 2
}

TEST_CASE("a resume runs again a line whose outcome the journal could not commit - its error "
          "line holds the provider's answer, and the row is open",
          "[cli][journal]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), {chat_line("a").dump()});
  // What a run whose finish failed (a full disk) leaves: the row released to pending, and an
  // error line with the answer the call had.
  append_pending_row(dir.file("run.db"), "a", 16);
  write_lines(dir.file("out.jsonl"),
              {json{{"id", "batch_req_0"},
                    {"custom_id", "a"},
                    {"response", {{"status_code", 200}, {"request_id", ""}, {"body", json::object()}}},
                    {"error", {{"code", "journal"}, {"message", "could not be committed"}}}}
                   .dump()});
  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--journal",
                          dir.file("run.db"), "--mock", "--mock-latency-ms", "1", "--progress",
                          "none"});
  INFO(r.err);
  CHECK(r.code == 0);  // not refused as another run's output
  const auto out = read_output(dir.file("out.jsonl"));
  REQUIRE(out.size() == 2);  // the error line, then the answer of the run again
  CHECK(out[1]["custom_id"] == "a");
  CHECK(out[1]["error"].is_null());
}

TEST_CASE("a resume runs a line whose journal append failed (no row, never sent), and writes "
          "the journal's outcome after a line that said the journal failed it",
          "[cli][journal]") {
  TempDir dir;
  write_lines(dir.file("in.jsonl"), {chat_line("a").dump(), chat_line("b").dump()});
  // "a": its append failed (a full disk): an error line, no row. "b": its finish failed in one
  // run (an error line), a later run committed its success and was killed before its line.
  {
    auto journal = laneq::Journal::open({dir.file("run.db")});
    laneq::JournalRecord rec;
    rec.id = "b";
    rec.priority = static_cast<int>(laneq::Priority::normal);
    rec.request.id = "b";
    rec.request.model = "gpt-test";
    rec.request.max_tokens = 16;  // chat_line's request, as the run journaled it
    rec.request.messages.push_back({"user", "hello b"});
    rec.enqueued_at = std::chrono::system_clock::now();
    std::promise<std::int64_t> appended;
    journal->append(std::move(rec),
                    [&](std::error_code ec, std::int64_t row) { appended.set_value(ec ? 0 : row); });
    const auto row = appended.get_future().get();
    REQUIRE(row > 0);
    laneq::Response answer;
    answer.status = 200;
    answer.text = "stored";
    std::promise<std::error_code> finished;
    journal->finish(row, laneq::JournalState::succeeded, 1, {}, "", &answer,
                    [&](std::error_code ec) { finished.set_value(ec); });
    REQUIRE_FALSE(finished.get_future().get());
  }
  const json journal_error = {{"code", "journal"}, {"message", "could not be stored"}};
  write_lines(dir.file("out.jsonl"),
              {json{{"id", "batch_req_0"}, {"custom_id", "a"}, {"response", nullptr},
                    {"error", journal_error}}.dump(),
               json{{"id", "batch_req_1"}, {"custom_id", "b"},
                    {"response", {{"status_code", 200}, {"request_id", ""},
                                  {"body", json::object()}}},
                    {"error", journal_error}}.dump()});
  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--journal",
                          dir.file("run.db"), "--mock", "--mock-latency-ms", "1", "--progress",
                          "none"});
  INFO(r.err);
  CHECK(r.code == 0);  // both succeeded in the end
  const auto out = read_output(dir.file("out.jsonl"));
  REQUIRE(out.size() == 4);  // the two error lines, then an outcome for each
  std::map<std::string, json> last;
  for (const auto& l : out) last[l["custom_id"]] = l;
  CHECK(last["a"]["error"].is_null());  // sent this time
  CHECK(last["b"]["error"].is_null());  // the journal's outcome, not sent again
}

TEST_CASE("a resume leaves a line whose journal row is still open to recovery - one output line "
          "for it and counts that add up, even when its admission fails",
          "[cli][journal]") {
  TempDir dir;
  auto big = chat_line("big");
  big["body"]["max_tokens"] = 50000;  // beyond --tpm 10000: refused at admission
  write_lines(dir.file("in.jsonl"), {chat_line("small").dump(), big.dump()});
  // the journal of a run that ended (a crash) with "big" acknowledged but not run
  append_pending_row(dir.file("run.db"), "big", 50000);
  const auto r = run_cli({"run", dir.file("in.jsonl"), "--out", dir.file("out.jsonl"), "--journal",
                          dir.file("run.db"), "--mock", "--tpm", "10000", "--mock-latency-ms",
                          "1", "--progress", "plain", "--progress-interval", "0.05"});
  INFO(r.err);
  CHECK(r.code == 1);  // "big" failed
  const auto out = read_output(dir.file("out.jsonl"));
  CHECK(out.size() == 2);
  CHECK(ids_in(out) == std::map<std::string, int>{{"big", 1}, {"small", 1}});
  for (const auto& l : out)
    if (l["custom_id"] == "big") CHECK(l["error"]["code"] == "exceeds_rate_limit");
  CHECK_THAT(r.err, Catch::Contains("0 done in an earlier run, 2 to run"));
  CHECK_THAT(r.err, Catch::Contains("1 of 2 lines succeeded, 1 failed"));
  // no progress line counted past the total
  const std::regex done_re(R"((\d+)/(\d+) done)");
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), done_re);
       it != std::sregex_iterator(); ++it)
    CHECK(std::stoul((*it)[1]) <= std::stoul((*it)[2]));
}
