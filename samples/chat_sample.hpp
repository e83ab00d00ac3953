#pragma once
// Shared by openai_chat and anthropic_chat: the same two calls through a RequestQueue, the
// provider being the only difference. Reads like user code on purpose.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/laneq.hpp"
#include "mock_api/mock_server.hpp"

struct ChatSample {
  const char* name;           // "OpenAI"
  const char* key_env;        // "OPENAI_API_KEY": set = the real API
  const char* model_env;      // "OPENAI_MODEL": overrides default_model
  const char* default_model;
};

inline bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Returns the process exit code: 0 when both calls succeeded.
template <class Provider, class ProviderConfig>
int run_chat_sample_or_throw(const ChatSample& s, int argc, char** argv) {
  using namespace std::chrono_literals;
  asio::io_context io;

  ProviderConfig pc{};
  std::optional<laneq::mock::MockServer> mock;
  if (!env_set(s.key_env)) {
    mock.emplace(io, laneq::mock::MockConfig{.latency = 30ms, .stream_chunk_delay = 5ms});
    mock->start();
    pc.api_key = "sk-mock";
    pc.base_url = mock->base_url();
    std::printf("%s not set: calling the bundled mock API server at %s\n", s.key_env,
                pc.base_url.c_str());
  }

  laneq::CurlTransport transport{io.get_executor()};
  Provider provider{transport, pc};
  // Limits of this sample's own, well under any paid tier's: set yours from your account's
  // (or let adopt_server_limits learn them from the answers' headers).
  laneq::RequestQueue queue{io.get_executor(), provider,
                            {.workers = 2, .rate_limits = {.requests = 60, .tokens = 40'000}}};
  queue.start();

  int failures = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    laneq::Request req{.model = env_set(s.model_env) ? std::getenv(s.model_env) : s.default_model,
                       .messages = {{"system", "Answer in one short sentence."},
                                    {"user", argc > 1 ? argv[1] : "Why do priority queues help?"}},
                       .max_tokens = 100};
    try {
      // (the critical lane's deadline is 30 s by default: a slow model may want more)
      const laneq::SubmitOptions opts{.priority = laneq::Priority::critical, .timeout = 120s};
      laneq::Response r = co_await queue.submit(req, opts);
      std::printf("%s (%s, %lld+%lld tokens, %.0f ms): %s\n", s.name, r.finish_reason.c_str(),
                  static_cast<long long>(r.usage.input_tokens),
                  static_cast<long long>(r.usage.output_tokens),
                  std::chrono::duration<double, std::milli>(r.service_time).count(),
                  r.text.c_str());

      req.stream = true;  // the same question, the answer printed as it arrives
      req.on_delta = [](std::string_view delta) {
        std::fwrite(delta.data(), 1, delta.size(), stdout);
        std::fflush(stdout);
      };
      std::printf("%s, streamed: ", s.name);
      r = co_await queue.submit(req, opts);
      std::printf("\n(%lld output tokens)\n", static_cast<long long>(r.usage.output_tokens));
    } catch (const laneq::RequestError& e) {
      ++failures;
      std::fprintf(stderr, "\n%s call failed: %s\n", s.name, e.what());
      if (!e.response().error_message.empty())
        std::fprintf(stderr, "  %s: %s\n", e.response().error_type.c_str(),
                     e.response().error_message.c_str());
    }
    co_await queue.shutdown();
    if (mock) mock->stop();
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });

  io.run();
  return failures == 0 ? 0 : 1;
}

// A bad configuration (e.g. OPENAI_BASE_URL without http://) is a message and exit code 2, not
// an abort.
template <class Provider, class ProviderConfig>
int run_chat_sample(const ChatSample& s, int argc, char** argv) {
  try {
    return run_chat_sample_or_throw<Provider, ProviderConfig>(s, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s sample: %s\n", s.name, e.what());
    return 2;
  }
}
