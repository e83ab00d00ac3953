#include "json_text.hpp"

#include <cstddef>

namespace laneq::detail {

namespace {

// At s[i] (a byte >= 0x80): {n, true} for a valid UTF-8 sequence of n bytes (RFC 3629), or
// {n, false} for the maximal start of one that breaks off after n bytes (a stray byte: 1). Such a
// start becomes one U+FFFD, as nlohmann's dump() and the Unicode standard's practice have it.
struct utf8_run {
  std::size_t n;
  bool valid;
};

utf8_run utf8_at(std::string_view s, std::size_t i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // <= U+10FFFF
  } else {
    return {1, false};
  }
  for (std::size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) return {k, false};
  }
  return {n, true};
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t plain = 0;  // start of the run of bytes copied as they are
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    utf8_run run{1, false};
    if (c >= 0x80) {
      run = utf8_at(s, i);
      if (run.valid) {  // a valid multi-byte character: kept
        i += run.n;
        continue;
      }
    }
    out.append(s, plain, i - plain);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += "0123456789abcdef"[c >> 4];
          out += "0123456789abcdef"[c & 0xf];
        } else {
          out += "\xef\xbf\xbd";  // U+FFFD for the broken sequence
        }
    }
    i += run.n;
    plain = i;
  }
  out.append(s, plain, std::string_view::npos);
  out += '"';
}

bool is_valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const utf8_run run = utf8_at(s, i);
    if (!run.valid) return false;
    i += run.n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out += s[i++];
      continue;
    }
    const utf8_run run = utf8_at(s, i);
    if (run.valid)
      out.append(s, i, run.n);
    else
      out += "\xef\xbf\xbd";  // U+FFFD
    i += run.n;
  }
  return out;
}

void append_json_messages(std::string& out, const std::vector<Message>& messages) {
  out += '[';
  for (std::size_t i = 0; i < messages.size(); ++i) {
    out += i ? ",{\"content\":" : "{\"content\":";
    append_json_string(out, messages[i].content);
    out += ",\"role\":";
    append_json_string(out, messages[i].role);
    out += '}';
  }
  out += ']';
}

}  // namespace laneq::detail
