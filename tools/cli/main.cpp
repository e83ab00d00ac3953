// laneq: the command-line tool.
//   laneq run requests.jsonl --out results.jsonl [flags]   push a batch file through the budgets
//   laneq mock [flags]                                      the bundled mock API server
// `laneq --help`, `laneq run --help`, `laneq mock --help` list the flags.
#include <csignal>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli/batch_run.hpp"
#include "common/flags.hpp"
#include "mock_api/cli.hpp"

namespace {

using laneq::cli::RunOptions;
using Flag = laneq::flags::Flag<RunOptions>;
using laneq::flags::integer;

constexpr std::int64_t big = 1'000'000'000'000;

const std::vector<Flag>& run_flags() {
  static const std::vector<Flag> all = {
      {"--out", true, "FILE        output JSONL, one line per input line (required)",
       [](RunOptions& o, auto, auto v) { o.output = v; }},
      {"--provider", true, "NAME   openai (default) or anthropic",
       [](RunOptions& o, auto f, auto v) {
         if (v != "openai" && v != "anthropic") laneq::flags::bad(f, "openai or anthropic");
         o.provider = v;
       }},
      {"--base-url", true, "URL    the API's base URL (default: $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL, else the provider's)",
       [](RunOptions& o, auto f, auto v) {
         // (empty means "not given" below: a batch for a test endpoint would go to the paid API)
         if (v.empty()) laneq::flags::bad(f, "needs a non-empty URL");
         o.base_url = v;
       }},
      {"--rpm", true, "N           requests per minute (0 = no limit)",
       [](RunOptions& o, auto f, auto v) { o.rpm = integer(f, v, 0, big); }},
      {"--tpm", true, "N           tokens per minute (0 = no limit)",
       [](RunOptions& o, auto f, auto v) { o.tpm = integer(f, v, 0, big); }},
      {"--smooth", false, "           space calls evenly instead of bursting up to the limit",
       [](RunOptions& o, auto, auto) { o.smooth = true; }},
      {"--fair-share", true, "WHAT  what clients of a lane share: lines (default) or tokens",
       [](RunOptions& o, auto f, auto v) {
         if (v != "lines" && v != "tokens") laneq::flags::bad(f, "lines or tokens");
         o.fair_by_tokens = v == "tokens";
       }},
      {"--workers", true, "N       calls in flight at most (8)",
       [](RunOptions& o, auto f, auto v) { o.workers = integer(f, v, 1, 10'000); }},
      {"--reserved-workers", true, "N  of the workers, kept free for critical lines (1; at most workers - 1)",
       [](RunOptions& o, auto f, auto v) {
         o.reserved_workers = integer(f, v, 0, 9'999);
         o.reserved_workers_given = true;
       }},
      {"--journal", true, "FILE    SQLite journal: crash-safe; the same command again resumes",
       [](RunOptions& o, auto f, auto v) {
         // (empty means "no journal": a run that could not resume, with no word of it)
         if (v.empty()) laneq::flags::bad(f, "needs a non-empty file name");
         o.journal = v;
       }},
      {"--timeout", true, "SECONDS per call attempt (0 = none, the default); retried like a network error",
       [](RunOptions& o, auto f, auto v) { o.timeout = std::chrono::seconds(integer(f, v, 0, big)); }},
      {"--max-attempts", true, "N  calls per line, retries included (3)",
       [](RunOptions& o, auto f, auto v) { o.max_attempts = integer(f, v, 1, 100); }},
      {"--mock", false, "             start the bundled mock API server (with the same limits) and call it",
       [](RunOptions& o, auto, auto) { o.mock = true; }},
      {"--mock-latency-ms", true, "N  the mock's answer time: N to 1.5 N ms, uniform (50)",
       [](RunOptions& o, auto f, auto v) {
         o.mock_latency = std::chrono::milliseconds(integer(f, v, 0, big));
         o.mock_latency_given = true;
       }},
      {"--mock-rpm-slice-ms", true, "N  the mock enforces --rpm in slices of N ms, as providers may (0: per minute)",
       [](RunOptions& o, auto f, auto v) {
         o.mock_rpm_slice = std::chrono::milliseconds(integer(f, v, 0, 60'000));
         o.mock_rpm_slice_given = true;
       }},
      {"--progress", true, "MODE   auto (a bar on a terminal, lines otherwise), bar, plain, none",
       [](RunOptions& o, auto f, auto v) {
         if (v != "auto" && v != "bar" && v != "plain" && v != "none")
           laneq::flags::bad(f, "auto, bar, plain or none");
         o.progress = v;
       }},
      {"--progress-interval", true, "SECONDS  between plain progress lines (5)",
       [](RunOptions& o, auto f, auto v) {
         o.progress_interval = std::chrono::milliseconds(
             static_cast<std::int64_t>(laneq::flags::number(f, v, 0.05, 3600) * 1000));
       }},
      {"--help", false, "             this text",
       [](RunOptions& o, auto, auto) { o.help = true; }},
  };
  return all;
}

const char* const top_usage =
    "usage: laneq run REQUESTS.jsonl --out RESULTS.jsonl [flags]\n"
    "       laneq mock [flags]\n"
    "\n"
    "  run   sends every line of an OpenAI Batch API file through priority lanes, fair\n"
    "        scheduling and your rate limits; writes the Batch API output format\n"
    "  mock  runs the bundled mock OpenAI / Anthropic API server on 127.0.0.1\n"
    "\n"
    "laneq run --help and laneq mock --help list their flags.\n";

std::string run_usage() {
  return std::string(
             "usage: laneq run REQUESTS.jsonl --out RESULTS.jsonl [flags]\n"
             "Input lines: {\"custom_id\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\" or\n"
             "\"/v1/messages\", \"body\": {...}, \"priority\": lane name or number, \"client\": tenant}.\n"
             "Exit code: 0 every line succeeded, 1 some failed (or, with --mock, the mock answered a 429),\n"
             "2 bad usage or set-up, 130 interrupted.\n\n") +
         laneq::flags::usage(run_flags());
}

int run_command(int argc, char** argv) {
  RunOptions o;
  std::vector<std::string> positional;
  try {
    laneq::flags::parse(run_flags(), o, argc, argv, 2, &positional);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "laneq run: %s (see laneq run --help)\n", e.what());
    return 2;
  }
  if (o.help) {
    std::fputs(run_usage().c_str(), stdout);
    return 0;
  }
  if (positional.size() != 1 || o.output.empty()) {
    std::fprintf(stderr, "laneq run: %s\n%s", positional.size() != 1 ? "name one input file" : "--out is required",
                 run_usage().c_str());
    return 2;
  }
  // Combinations that would be quietly changed or ignored: said instead.
  const char* conflict = nullptr;
  if (o.reserved_workers_given && o.reserved_workers >= o.workers)
    conflict = "--reserved-workers must be below --workers (one worker at least takes any lane)";
  else if (o.mock && !o.base_url.empty())
    conflict = "--mock and --base-url exclude each other (the mock has its own address)";
  else if (o.mock_latency_given && !o.mock)
    conflict = "--mock-latency-ms needs --mock";
  else if (o.mock_rpm_slice_given && !o.mock)
    conflict = "--mock-rpm-slice-ms needs --mock";
  else if (o.mock_rpm_slice.count() > 0 && o.rpm == 0)
    conflict = "--mock-rpm-slice-ms needs --rpm (the limit it slices)";
  if (conflict) {
    std::fprintf(stderr, "laneq run: %s (see laneq run --help)\n", conflict);
    return 2;
  }
  o.input = positional[0];
  return laneq::cli::run_batch(o);
}

}  // namespace

int main(int argc, char** argv) {
  // A pipe whose reader is gone (`2>&1 | tee log` and a Ctrl-C that ends tee too, `| head`)
  // must not kill a run with calls in flight: the write fails instead, and is handled (a
  // progress line is lost; --out's failure exits 2 as a full disk does).
  std::signal(SIGPIPE, SIG_IGN);
  const std::string_view command = argc > 1 ? argv[1] : "";
  if (command == "run") return run_command(argc, argv);
  if (command == "mock") return laneq::mock::run_mock_program(argc - 1, argv + 1, "laneq mock");
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(top_usage, stdout);
    return 0;
  }
  std::fprintf(stderr, "%s%s", command.empty() ? "" : ("laneq: unknown command \"" + std::string(command) + "\"\n").c_str(),
               top_usage);
  return 2;
}
