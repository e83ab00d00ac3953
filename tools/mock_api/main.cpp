// laneq-mock-api: the mock OpenAI / Anthropic API server as a program, for benchmarks, samples
// and the demo. Flags: laneq-mock-api --help.
#include <csignal>
#include <iostream>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>

#include "mock_api/cli.hpp"
#include "mock_api/mock_server.hpp"

int main(int argc, char** argv) {
  using namespace laneq::mock;
  CliOptions opts;
  try {
    opts = parse_cli(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "laneq-mock-api: " << e.what() << " (see laneq-mock-api --help)\n";
    return 2;
  }
  if (opts.help) {
    std::cout << cli_usage();
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
    std::cerr << "laneq-mock-api: cannot serve on 127.0.0.1:" << opts.config.port << ": " << e.what()
              << '\n';
    return 1;
  }
}
