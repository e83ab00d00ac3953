#pragma once
// JSON text written directly, without building an nlohmann::json tree: for the hot paths that
// only ever write a fixed shape (request bodies, journal rows). Internal to lib/.
#include <string>
#include <string_view>
#include <vector>

#include "laneq/request.hpp"

namespace laneq::detail {

// Appends `s` as a JSON string literal, quotes included: the escapes nlohmann's dump() uses
// (\" \\ \n \r \t \b \f, \u00XX for other control characters), valid UTF-8 kept as it is, and
// each broken UTF-8 sequence (its maximal start, or a stray byte) replaced by one U+FFFD, as
// dump() with error_handler_t::replace does: the same text, and it always parses.
void append_json_string(std::string& out, std::string_view s);

// `s` with each broken UTF-8 sequence replaced by one U+FFFD, as append_json_string does; `s`
// itself when it is valid. For names that go into JSON and Prometheus text (both need UTF-8).
std::string to_valid_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s) noexcept;

// Appends [{"content":...,"role":...},...]: chat messages as the APIs (and the journal) take them.
void append_json_messages(std::string& out, const std::vector<Message>& messages);

}  // namespace laneq::detail
