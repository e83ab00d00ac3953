#pragma once
// ChatCall: what the mock takes from a chat request body, whichever API it came in; Answer: the
// deterministic reply it sends back. Pure.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace laneq::mock {

// A request body the provider would refuse with 400; what() is the provider-style message.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ChatCall {
  std::string model{};
  std::int64_t prompt_tokens = 0;       // bytes of message (and system) text / 4 + 1
  std::optional<std::int64_t> max_tokens{};
  bool stream = false;
  bool include_usage = false;           // OpenAI stream_options.include_usage
  std::string last_user_text{};
};

struct Answer {
  std::string id{};
  std::string model{};
  std::int64_t created = 0;             // Unix seconds
  std::string text{};                   // "mock reply to: <first 40 bytes of the last user message>"
  std::vector<std::string> pieces{};    // `text` split for streaming (at least 2 pieces)
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;   // min(max_tokens, MockConfig::completion_tokens)
  bool truncated = false;               // max_tokens cut the answer: "length" / "max_tokens"
};

Answer make_answer(const ChatCall& call, std::int64_t completion_tokens, std::string id,
                   std::int64_t created);

// The token estimate the mock charges and reports for `text_bytes` bytes of message text.
inline std::int64_t prompt_tokens_for(std::size_t text_bytes) noexcept {
  return static_cast<std::int64_t>(text_bytes / 4 + 1);
}

// The longest prefix of `s` of at most `max_bytes` that does not split a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) noexcept;

}  // namespace laneq::mock
