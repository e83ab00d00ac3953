#pragma once
// Why the model stopped, in one vocabulary for every provider. Response::finish_reason keeps
// the provider's own word; Response::finish() maps it, so code that checks "was the answer cut
// short?" works the same against OpenAI and Anthropic.
#include <cstdint>
#include <string_view>

namespace laneq {

enum class Finish : std::uint8_t {
  unknown,         // no reason sent (e.g. a stream cut short), or a word laneq does not know
  stop,            // a natural end or a stop sequence (OpenAI "stop"; Anthropic "end_turn",
                   // "stop_sequence")
  length,          // cut short by max_tokens or the context window (OpenAI "length"; Anthropic
                   // "max_tokens", "model_context_window_exceeded")
  tool_call,       // the model asks for a tool (OpenAI "tool_calls", "function_call"; Anthropic
                   // "tool_use")
  content_filter,  // withheld or stopped by the provider's safety filter (OpenAI
                   // "content_filter"; Anthropic "refusal")
  paused,          // Anthropic "pause_turn": a long server-tool turn paused; send the answer
                   // back as the next assistant message to let it go on
};

// The Finish for a provider's finish_reason / stop_reason (exact, case-sensitive, as sent;
// the lists in OpenAI's chat completions and Anthropic's messages references).
constexpr Finish finish_of(std::string_view r) noexcept {
  if (r == "stop" || r == "end_turn" || r == "stop_sequence") return Finish::stop;
  if (r == "length" || r == "max_tokens" || r == "model_context_window_exceeded")
    return Finish::length;
  if (r == "tool_calls" || r == "function_call" || r == "tool_use") return Finish::tool_call;
  if (r == "content_filter" || r == "refusal") return Finish::content_filter;
  if (r == "pause_turn") return Finish::paused;
  return Finish::unknown;
}

// "stop", "length", ... (the enumerator's name), for logs and JSON.
constexpr std::string_view finish_name(Finish f) noexcept {
  switch (f) {
    case Finish::unknown: break;
    case Finish::stop: return "stop";
    case Finish::length: return "length";
    case Finish::tool_call: return "tool_call";
    case Finish::content_filter: return "content_filter";
    case Finish::paused: return "paused";
  }
  return "unknown";
}

}  // namespace laneq
