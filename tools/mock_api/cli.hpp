#pragma once
// Command-line flags of laneq-mock-api, parsed into a MockConfig.
#include <stdexcept>
#include <string>
#include <string_view>

#include "mock_api/mock_config.hpp"

namespace laneq::mock {

struct CliOptions {
  MockConfig config{};
  unsigned threads = 1;  // threads running the io_context
  bool help = false;
};

// "--flag value" or "--flag=value". Throws std::invalid_argument naming the flag for an unknown
// flag, a missing or malformed value, or a config validate() rejects.
CliOptions parse_cli(int argc, const char* const* argv);

// The --help text; `program` is how the user ran it ("laneq-mock-api", "laneq mock").
std::string cli_usage(std::string_view program = "laneq-mock-api");

// The whole program: parses argv[1..], serves until SIGINT / SIGTERM, returns the exit code
// (0; 2 for bad flags; 1 when it cannot serve). `program` names it in messages
// ("laneq-mock-api", "laneq mock").
int run_mock_program(int argc, const char* const* argv, std::string_view program);

}  // namespace laneq::mock
