// One chat completion, then the same question streamed, through laneq to OpenAI or any
// OpenAI-compatible endpoint. With OPENAI_API_KEY set it calls the real API (OPENAI_BASE_URL
// and OPENAI_MODEL to point elsewhere); without a key it starts the bundled mock API server
// on 127.0.0.1 and calls that, so the sample always runs.
//   openai_chat ["your question"]
#include "chat_sample.hpp"

int main(int argc, char** argv) {
  return run_chat_sample<laneq::OpenAIProvider, laneq::OpenAIConfig>(
      {.name = "OpenAI", .key_env = "OPENAI_API_KEY", .model_env = "OPENAI_MODEL",
       .default_model = "gpt-4o-mini"},
      argc, argv);
}
