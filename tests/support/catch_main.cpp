#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

// The tests never reach a real API or a proxy, whatever the developer's shell (or a CI
// runner) exports: an OPENAI_BASE_URL would move the official endpoint, a key would be sent,
// and curl sends even 127.0.0.1 through http_proxy / ALL_PROXY unless no_proxy names it.
// Cleared here, before any test runs, so the child processes the tests start inherit it too.
int main(int argc, char* argv[]) {
  for (const char* name : {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL",
                           "ANTHROPIC_BASE_URL", "http_proxy", "https_proxy", "HTTP_PROXY",
                           "HTTPS_PROXY", "ALL_PROXY", "all_proxy"})
    ::unsetenv(name);
  ::setenv("no_proxy", "127.0.0.1,localhost,::1,.test", 1);
  ::setenv("NO_PROXY", "127.0.0.1,localhost,::1,.test", 1);
  return Catch::Session().run(argc, argv);
}
