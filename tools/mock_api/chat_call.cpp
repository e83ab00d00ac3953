#include "mock_api/chat_call.hpp"

#include <algorithm>

namespace laneq::mock {

std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) noexcept {
  if (s.size() <= max_bytes) return s;
  std::size_t n = max_bytes;
  // Step back over continuation bytes (10xxxxxx) so the cut falls before a lead byte.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

Answer make_answer(const ChatCall& call, std::int64_t completion_tokens, std::string id,
                   std::int64_t created) {
  Answer a;
  a.id = std::move(id);
  a.model = call.model;
  a.created = created;
  a.text = "mock reply to: ";
  a.text += utf8_prefix(call.last_user_text, 40);
  a.prompt_tokens = call.prompt_tokens;
  a.completion_tokens = completion_tokens;
  if (call.max_tokens && *call.max_tokens < completion_tokens) {
    a.completion_tokens = *call.max_tokens;
    a.truncated = true;
  }
  // Stream pieces: word by word, each piece keeping its trailing space ("mock ", "reply ", ...).
  std::string_view rest = a.text;
  while (!rest.empty()) {
    auto end = rest.find(' ');
    end = end == std::string_view::npos ? rest.size() : end + 1;
    a.pieces.emplace_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  return a;
}

}  // namespace laneq::mock
