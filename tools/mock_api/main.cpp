// laneq-mock-api: the mock OpenAI / Anthropic API server as a program, for benchmarks, samples
// and the demo. Flags: laneq-mock-api --help. (`laneq mock` runs the same.)
#include "mock_api/cli.hpp"

int main(int argc, char** argv) { return laneq::mock::run_mock_program(argc, argv, "laneq-mock-api"); }
