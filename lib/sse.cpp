#include "laneq/sse.hpp"

namespace laneq {

namespace {

constexpr unsigned char kBom[3] = {0xEF, 0xBB, 0xBF};

}  // namespace

void SseParser::reset() noexcept {
  line_.clear();
  pending_.event.clear();
  pending_.data.clear();
  pending_.id.clear();
  bom_seen_ = 0;
  bom_checked_ = false;
  after_cr_ = false;
  failed_ = false;
}

std::size_t SseParser::buffered() const noexcept {
  return line_.size() + pending_.event.size() + pending_.data.size() + bom_seen_;
}

void SseParser::fail() noexcept {
  failed_ = true;
  // Release the memory too: a failed parser must not keep a 4 MiB line alive.
  std::string().swap(line_);
  std::string().swap(pending_.data);
  std::string().swap(pending_.event);
}

void SseParser::feed_impl(std::string_view chunk, Sink sink, void* target) {
  if (failed_) return;
  try {
    // A BOM is only dropped at the very start; its bytes may arrive one per chunk.
    while (!bom_checked_ && !chunk.empty()) {
      if (static_cast<unsigned char>(chunk.front()) == kBom[bom_seen_]) {
        chunk.remove_prefix(1);
        if (++bom_seen_ == 3) {
          bom_checked_ = true;
          bom_seen_ = 0;
        }
      } else {
        // Not a BOM after all: the bytes matched so far are ordinary line content (none of
        // them is a line break), so they start the first line.
        bom_checked_ = true;
        line_.append(reinterpret_cast<const char*>(kBom), bom_seen_);
        bom_seen_ = 0;
      }
    }
    feed_lines(chunk, sink, target);
  } catch (...) {
    fail();
    throw;
  }
}

void SseParser::feed_lines(std::string_view chunk, Sink sink, void* target) {
  std::size_t i = 0;
  const std::size_t n = chunk.size();
  while (i < n && !failed_) {
    if (after_cr_) {
      after_cr_ = false;
      if (chunk[i] == '\n') {
        ++i;
        continue;
      }
    }
    const std::size_t end = chunk.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      // The line continues in a later chunk.
      if (line_.size() + (n - i) > max_line_) return fail();
      line_.append(chunk.substr(i));
      return;
    }
    std::string_view line = chunk.substr(i, end - i);
    if (!line_.empty()) {
      if (line_.size() + line.size() > max_line_) return fail();
      line_.append(line);
      line = line_;
    } else if (line.size() > max_line_) {
      return fail();
    }
    after_cr_ = chunk[end] == '\r';
    i = end + 1;
    process_line(line, sink, target);
    line_.clear();
  }
}

void SseParser::process_line(std::string_view line, Sink sink, void* target) {
  if (line.empty()) {
    // Dispatch. No data line at all -> nothing to dispatch (the spec's rule), buffers reset.
    if (!pending_.data.empty()) {
      pending_.data.pop_back();  // every data line appended "\n"; the last one is not part of it
      sink(target, pending_);
    }
    pending_.data.clear();
    pending_.event.clear();
    return;
  }
  if (line.front() == ':') return;  // comment (servers use them as keep-alives)

  std::string_view field = line;
  std::string_view value{};
  if (const auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }

  if (field == "data") {
    // The data buffer holds one "\n" per line, so this bounds the dispatched data by max_line.
    if (pending_.data.size() + value.size() > max_line_) return fail();
    pending_.data.append(value);
    pending_.data.push_back('\n');
  } else if (field == "event") {
    pending_.event.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) pending_.id.assign(value);
  }
  // `retry` (reconnection time) is for EventSource reconnection, which laneq does not do;
  // unknown fields are ignored by the spec.
}

}  // namespace laneq
