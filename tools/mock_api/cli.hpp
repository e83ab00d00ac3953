#pragma once
// Command-line flags of laneq-mock-api, parsed into a MockConfig.
#include <stdexcept>
#include <string>

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

std::string cli_usage();

}  // namespace laneq::mock
