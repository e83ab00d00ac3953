#include "mock_api/cli.hpp"

#include <csignal>
#include <iostream>
#include <string_view>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>

#include "common/flags.hpp"
#include "mock_api/mock_server.hpp"

namespace laneq::mock {

namespace {

using flags::bad;
using flags::integer;
using Flag = flags::Flag<CliOptions>;

double rate(std::string_view flag, std::string_view v) { return flags::number(flag, v, 0.0, 1.0); }

const std::vector<Flag>& flags() {
  using ms = std::chrono::milliseconds;
  constexpr std::int64_t big = 1'000'000'000'000;
  static const std::vector<Flag> all = {
      {"--port", true, "N        listen on 127.0.0.1:N (0, the default: any free port)",
       [](CliOptions& o, auto f, auto v) { o.config.port = static_cast<unsigned short>(integer(f, v, 0, 65535)); }},
      {"--threads", true, "N     threads running the server (1)",
       [](CliOptions& o, auto f, auto v) { o.threads = static_cast<unsigned>(integer(f, v, 1, 256)); }},
      {"--latency-ms", true, "N  delay before each answer (0)",
       [](CliOptions& o, auto f, auto v) { o.config.latency = ms(integer(f, v, 0, big)); }},
      {"--jitter-ms", true, "N   + uniform [0, N] ms (0)",
       [](CliOptions& o, auto f, auto v) { o.config.jitter = ms(integer(f, v, 0, big)); }},
      {"--stream-chunk-delay-ms", true, "N  between stream events (0)",
       [](CliOptions& o, auto f, auto v) { o.config.stream_chunk_delay = ms(integer(f, v, 0, big)); }},
      {"--completion-tokens", true, "N  answer size, capped by max_tokens (16)",
       [](CliOptions& o, auto f, auto v) { o.config.completion_tokens = integer(f, v, 1, big); }},
      {"--rpm", true, "N         requests per minute per API key (0 = no limit)",
       [](CliOptions& o, auto f, auto v) { o.config.rpm = integer(f, v, 0, big); }},
      {"--rpm-slice-ms", true, "N  enforce --rpm in slices of N ms: the bucket holds rpm x N / 60000 (0 = the whole minute)",
       [](CliOptions& o, auto f, auto v) { o.config.rpm_slice = ms(integer(f, v, 0, 60'000)); }},
      {"--tpm", true, "N         tokens per minute per API key (0 = no limit)",
       [](CliOptions& o, auto f, auto v) { o.config.tpm = integer(f, v, 0, big); }},
      {"--input-tpm", true, "N   Anthropic input tokens per minute (0 = no limit)",
       [](CliOptions& o, auto f, auto v) { o.config.input_tpm = integer(f, v, 0, big); }},
      {"--output-tpm", true, "N  Anthropic output tokens per minute (0 = no limit)",
       [](CliOptions& o, auto f, auto v) { o.config.output_tpm = integer(f, v, 0, big); }},
      {"--no-refund", false, "        keep the whole max_tokens charge (OpenAI style)",
       [](CliOptions& o, auto, auto) { o.config.refund_unused_tokens = false; }},
      {"--no-headers-on-429", false, " 429s without rate-limit and retry-after headers",
       [](CliOptions& o, auto, auto) { o.config.rate_limit_headers_on_429 = false; }},
      {"--round-anthropic-tokens", false, "  Anthropic token remaining rounded to the nearest 1000",
       [](CliOptions& o, auto, auto) { o.config.round_anthropic_tokens = true; }},
      {"--should-retry", true, "true|false  x-should-retry on every error answer",
       [](CliOptions& o, auto f, auto v) {
         if (v != "true" && v != "false") bad(f, "expected true or false");
         o.config.should_retry = v == "true";
       }},
      {"--error-rate-500", true, "x  share of calls answered 500 (0..1)",
       [](CliOptions& o, auto f, auto v) { o.config.error_rate_500 = rate(f, v); }},
      {"--error-rate-503", true, "x  ... 503",
       [](CliOptions& o, auto f, auto v) { o.config.error_rate_503 = rate(f, v); }},
      {"--error-rate-529", true, "x  ... 529 overloaded_error",
       [](CliOptions& o, auto f, auto v) { o.config.error_rate_529 = rate(f, v); }},
      {"--insufficient-quota-rate", true, "x  ... 429 insufficient_quota",
       [](CliOptions& o, auto f, auto v) { o.config.insufficient_quota_rate = rate(f, v); }},
      {"--too-large-rate", true, "x  ... 413 request_too_large (OpenAI: 429 Request too large)",
       [](CliOptions& o, auto f, auto v) { o.config.too_large_rate = rate(f, v); }},
      {"--reset-rate", true, "x      ... connection reset",
       [](CliOptions& o, auto f, auto v) { o.config.reset_rate = rate(f, v); }},
      {"--malformed-rate", true, "x  ... 200 with a body that is not JSON",
       [](CliOptions& o, auto f, auto v) { o.config.malformed_rate = rate(f, v); }},
      {"--stall-rate", true, "x      ... part of the answer, then silence",
       [](CliOptions& o, auto f, auto v) { o.config.stall_rate = rate(f, v); }},
      {"--stream-error-rate", true, "x  share of streams with an error event mid-stream",
       [](CliOptions& o, auto f, auto v) { o.config.stream_error_rate = rate(f, v); }},
      {"--stream-cut-rate", true, "x  share of streams closed before their final/usage events",
       [](CliOptions& o, auto f, auto v) { o.config.stream_cut_rate = rate(f, v); }},
      {"--seed", true, "N        seed of the jitter and injection draws (42)",
       [](CliOptions& o, auto f, auto v) { o.config.seed = static_cast<std::uint64_t>(integer(f, v, 0, INT64_MAX)); }},
      {"--max-body-bytes", true, "N  larger request bodies get 413 (33554432)",
       [](CliOptions& o, auto f, auto v) { o.config.max_body_bytes = static_cast<std::size_t>(integer(f, v, 1, big)); }},
      {"--help", false, "             this text",
       [](CliOptions& o, auto, auto) { o.help = true; }},
  };
  return all;
}

}  // namespace

CliOptions parse_cli(int argc, const char* const* argv) {
  CliOptions opts;
  flags::parse(flags(), opts, argc, argv);
  validate(opts.config);  // e.g. error rates that add up to more than 1
  return opts;
}

std::string cli_usage(std::string_view program) {
  std::string u = "usage: " + std::string(program) + " [flags]\n";
  u += "Mock OpenAI (POST /v1/chat/completions) and Anthropic (POST /v1/messages) API server on\n"
       "127.0.0.1. Prints \"laneq-mock-api listening on 127.0.0.1:<port>\", runs until SIGINT or\n"
       "SIGTERM. GET /stats, POST /control/script, POST /control/reset: see docs/mock_api.md.\n\n";
  return u + flags::usage(flags());
}

int run_mock_program(int argc, const char* const* argv, std::string_view program) {
  CliOptions opts;
  try {
    opts = parse_cli(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << program << ": " << e.what() << " (see " << program << " --help)\n";
    return 2;
  }
  if (opts.help) {
    std::cout << cli_usage(program);
    return 0;
  }
  try {
    asio::io_context io(static_cast<int>(opts.threads));
    MockServer server(io, opts.config);
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](std::error_code ec, int) {
      if (!ec) server.stop();  // run() returns once every connection has closed
    });
    server.start();
    // The one line scripts and tests wait for; flushed so a pipe sees it at once.
    std::cout << "laneq-mock-api listening on 127.0.0.1:" << server.port() << std::endl;
    std::vector<std::thread> extra;
    for (unsigned i = 1; i < opts.threads; ++i) extra.emplace_back([&io] { io.run(); });
    io.run();
    for (auto& t : extra) t.join();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": cannot serve on 127.0.0.1:" << opts.config.port << ": " << e.what()
              << '\n';
    return 1;
  }
}

}  // namespace laneq::mock
