// One message, then the same question streamed, through laneq to Anthropic's Messages API.
// With ANTHROPIC_API_KEY set it calls the real API (ANTHROPIC_BASE_URL and ANTHROPIC_MODEL to
// point elsewhere); without a key it starts the bundled mock API server on 127.0.0.1 and calls
// that, so the sample always runs.
//   anthropic_chat ["your question"]
#include "chat_sample.hpp"

int main(int argc, char** argv) {
  return run_chat_sample<laneq::AnthropicProvider, laneq::AnthropicConfig>(
      {.name = "Anthropic", .key_env = "ANTHROPIC_API_KEY", .model_env = "ANTHROPIC_MODEL",
       .default_model = "claude-3-5-haiku-latest"},
      argc, argv);
}
