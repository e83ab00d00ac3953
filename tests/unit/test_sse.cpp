// SSE parsing: every WHATWG event-stream rule, the line limit, and chunk-boundary independence.
#include <catch2/catch.hpp>

#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "laneq/sse.hpp"

using laneq::SseEvent;
using laneq::SseParser;

namespace {

struct Ev {
  std::string event, data, id;
  bool operator==(const Ev&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Ev& e) {
  return os << "{event=\"" << e.event << "\" data=\"" << e.data << "\" id=\"" << e.id << "\"}";
}

// Feeds `chunks` in order and collects every dispatched event.
std::vector<Ev> feed_chunks(SseParser& p, const std::vector<std::string>& chunks) {
  std::vector<Ev> out;
  for (const auto& c : chunks)
    p.feed(c, [&](const SseEvent& e) { out.push_back({e.event, e.data, e.id}); });
  return out;
}

std::vector<Ev> parse(std::string_view stream) {
  SseParser p;
  return feed_chunks(p, {std::string(stream)});
}

// The one event a stream must produce.
Ev single(std::string_view stream) {
  const std::vector<Ev> got = parse(stream);
  REQUIRE(got.size() == 1);
  return got[0];
}

std::vector<Ev> parse_bytewise(std::string_view stream) {
  SseParser p;
  std::vector<std::string> chunks;
  for (char c : stream) chunks.emplace_back(1, c);
  return feed_chunks(p, chunks);
}

std::vector<Ev> parse_split(std::string_view stream, std::mt19937_64& rng, std::size_t max_chunk) {
  std::vector<std::string> chunks;
  std::size_t i = 0;
  while (i < stream.size()) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, max_chunk)(rng);
    chunks.emplace_back(stream.substr(i, n));  // empty chunks on purpose
    i += n;
  }
  SseParser p;
  return feed_chunks(p, chunks);
}

int free_function_events = 0;
void collect_free_function(const SseEvent&) { ++free_function_events; }

}  // namespace

TEST_CASE("an event is dispatched by the blank line that ends it, with its data, no type and no id") {
  SseParser p;
  std::vector<Ev> got = feed_chunks(p, {"data: hello\n"});
  CHECK(got.empty());
  CHECK(p.buffered() == std::string("hello\n").size());
  got = feed_chunks(p, {"\n"});
  REQUIRE(got.size() == 1);
  CHECK(got[0] == Ev{"", "hello", ""});
  CHECK(p.buffered() == 0);
}

TEST_CASE("an event whose blank line never came is not dispatched") {
  CHECK(parse("data: a\n\ndata: cut").size() == 1);
  CHECK(parse("data: a\n\ndata: cut\n").size() == 1);
  CHECK(parse("data: cut\r\n").empty());
}

TEST_CASE("LF, CRLF and CR line endings, also mixed, give the same events") {
  const std::vector<Ev> want{{"e", "a\nb", ""}, {"", "c", ""}};
  CHECK(parse("event: e\ndata: a\ndata: b\n\ndata: c\n\n") == want);
  CHECK(parse("event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n") == want);
  CHECK(parse("event: e\rdata: a\rdata: b\r\rdata: c\r\r") == want);
  CHECK(parse("event: e\ndata: a\r\ndata: b\r\ndata: c\n\n").size() == 1);  // no blank line before c
  CHECK(parse("event: e\rdata: a\r\ndata: b\n\rdata: c\r\n\n") == want);
}

TEST_CASE("a CRLF split across two chunks is one line break, not two") {
  SseParser p;
  const std::vector<Ev> got = feed_chunks(p, {"data: a\r", "\ndata: b\r", "\n\r", "\n"});
  REQUIRE(got.size() == 1);
  CHECK(got[0].data == "a\nb");

  SseParser q;  // CR then CR: a break and a blank line
  const std::vector<Ev> got2 = feed_chunks(q, {"data: a\r", "\r"});
  REQUIRE(got2.size() == 1);
  CHECK(got2[0].data == "a");
}

TEST_CASE("comment lines are ignored and neither dispatch nor break an event") {
  CHECK(parse(": keep-alive\n\n").empty());
  CHECK(parse(":\n:\n\n").empty());
  const std::vector<Ev> got = parse("data: a\n: comment in the middle\ndata: b\n\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0].data == "a\nb");
}

TEST_CASE("multi-line data is joined by a newline, with no trailing newline") {
  const std::vector<Ev> got = parse("data: {\ndata: \"k\": 1\ndata: }\n\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0].data == "{\n\"k\": 1\n}");
  const std::vector<Ev> blank_lines = parse("data:\ndata:\n\n");
  REQUIRE(blank_lines.size() == 1);
  CHECK(blank_lines[0].data == "\n");
}

TEST_CASE("exactly one leading space after the colon is stripped") {
  CHECK(single("data: x\n\n").data == "x");
  CHECK(single("data:x\n\n").data == "x");
  CHECK(single("data:  x\n\n").data == " x");
  CHECK(single("data:\tx\n\n").data == "\tx");
  CHECK(single("data: x \n\n").data == "x ");
  CHECK(single("data: a: b\n\n").data == "a: b");  // only the first colon splits
  CHECK(single("event:  sp\ndata: x\n\n").event == " sp");
}

TEST_CASE("a field without a colon is that field with an empty value") {
  const std::vector<Ev> got = parse("data\n\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0].data.empty());
  const std::vector<Ev> two = parse("data\ndata\n\n");
  REQUIRE(two.size() == 1);
  CHECK(two[0].data == "\n");
  CHECK(single("event: x\nevent\ndata: d\n\n").event.empty());
}

TEST_CASE("unknown fields and retry are ignored - field names are case-sensitive") {
  const std::vector<Ev> got = parse("foo: bar\nretry: 1000\nDATA: no\nData: no\ndata: yes\n\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0] == Ev{"", "yes", ""});
  CHECK(parse("retry: 5\n\n").empty());
  CHECK(parse(" data: leading space makes another field\n\n").empty());
}

TEST_CASE("a BOM is dropped at the start of the stream only, even when it arrives byte by byte") {
  CHECK(parse("\xEF\xBB\xBF" "data: a\n\n") == std::vector<Ev>{{"", "a", ""}});
  CHECK(parse_bytewise("\xEF\xBB\xBF" "data: a\n\n") == std::vector<Ev>{{"", "a", ""}});
  // A second BOM is content: it makes the field name "\xEF\xBB\xBF" "data", which is unknown.
  CHECK(parse("\xEF\xBB\xBF\xEF\xBB\xBF" "data: a\n\n").empty());
  CHECK(parse("data: a\n\n\xEF\xBB\xBF" "data: b\n\n").size() == 1);
  // A partial BOM is content too, also when the partial bytes came in their own chunks.
  SseParser p;
  CHECK(feed_chunks(p, {"\xEF", "\xBB", "data: a\n\n"}).empty());
  SseParser q;
  CHECK(feed_chunks(q, {"\xEF\xBB", "\xBF", "data: a\n\n"}).size() == 1);
  SseParser r;  // a lone lead byte then a line break: the line is "\xEF", an unknown field
  CHECK(feed_chunks(r, {"\xEF", "\ndata: a\n\n"}).size() == 1);
}

TEST_CASE("an event with no data line is not dispatched, and its type does not leak into the next") {
  CHECK(parse("event: ping\n\n").empty());
  CHECK(parse("id: 3\n\n").empty());
  const std::vector<Ev> got = parse("event: lost\n\ndata: x\n\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0].event.empty());
}

TEST_CASE("the event type is kept as sent, empty when not given, and reset after each event") {
  const std::vector<Ev> got = parse("event: content_block_delta\ndata: 1\n\ndata: 2\n\n");
  REQUIRE(got.size() == 2);
  CHECK(got[0].event == "content_block_delta");
  CHECK(got[1].event.empty());  // the spec would call it "message"; laneq leaves it empty
  CHECK(single("event: a\nevent: b\ndata: x\n\n").event == "b");
}

TEST_CASE("the last event id persists across events - an id with NUL is ignored") {
  using namespace std::string_literals;
  const std::vector<Ev> got = parse("id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n");
  REQUIRE(got.size() == 3);
  CHECK(got[0].id == "7");
  CHECK(got[1].id == "7");
  CHECK(got[2].id.empty());
  // One literal: GCC 12 at -O1 warns falsely (-Warray-bounds) on the sum of two std::strings.
  const std::vector<Ev> nul = parse("id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n"s);
  REQUIRE(nul.size() == 2);
  CHECK(nul[1].id == "1");
  // An id in an event that is not dispatched still counts for the next one.
  CHECK(single("id: 9\n\ndata: z\n\n").id == "9");
}

TEST_CASE("a line longer than the limit fails the parser instead of growing") {
  SseParser p(16);
  CHECK(p.max_line() == 16);
  CHECK(feed_chunks(p, {"data: 0123456789\n\n"}).size() == 1);  // exactly 16 bytes: fine
  CHECK_FALSE(p.failed());
  CHECK(feed_chunks(p, {"data: 01234567890\n\n"}).empty());     // 17 bytes
  CHECK(p.failed());
  CHECK(p.buffered() == 0);
  CHECK(feed_chunks(p, {"data: a\n\n"}).empty());  // ignored once failed

  SseParser q(16);  // the same line, growing across chunks without a break
  CHECK(feed_chunks(q, {"data: 0123", "456789"}).empty());
  CHECK_FALSE(q.failed());
  CHECK(q.buffered() == 16);
  feed_chunks(q, {"0"});
  CHECK(q.failed());
  CHECK(q.buffered() == 0);

  SseParser r(16);  // a comment line counts too: it would have to be buffered just the same
  feed_chunks(r, {": this comment is far too long"});
  CHECK(r.failed());
}

TEST_CASE("an event's data beyond the limit fails the parser even when every line is short") {
  SseParser p(10);
  CHECK(feed_chunks(p, {"data:01234\ndata:5678\n\n"}).size() == 1);  // "01234\n5678" = 10
  CHECK_FALSE(p.failed());
  std::string many;
  for (int i = 0; i < 5; ++i) many += "data:01\n";
  CHECK(feed_chunks(p, {many}).empty());
  CHECK(p.failed());
}

TEST_CASE("the default line limit is 4 MiB") {
  CHECK(SseParser::default_max_line == 4u * 1024 * 1024);
  SseParser p;
  CHECK(p.max_line() == SseParser::default_max_line);
  const std::string just_fits = "data: " + std::string(SseParser::default_max_line - 6, 'x');
  CHECK(feed_chunks(p, {just_fits, "\n\n"}).size() == 1);
  CHECK_FALSE(p.failed());
  feed_chunks(p, {just_fits + "y"});
  CHECK(p.failed());
}

TEST_CASE("reset starts a new stream: buffers, id, failure and BOM detection") {
  SseParser p(8);
  feed_chunks(p, {"id: 5\ndata: a\n\ndata: 123456789"});
  CHECK(p.failed());
  p.reset();
  CHECK_FALSE(p.failed());
  CHECK(p.buffered() == 0);
  const std::vector<Ev> got = feed_chunks(p, {"\xEF\xBB\xBF" "data: b\n\n"});
  REQUIRE(got.size() == 1);
  CHECK(got[0] == Ev{"", "b", ""});

  SseParser q;
  feed_chunks(q, {"event: x\ndata: partial\ndata: li"});
  CHECK(q.buffered() == std::string("x").size() + std::string("partial\n").size() +
                          std::string("data: li").size());
  q.reset();
  CHECK(q.buffered() == 0);
  CHECK(feed_chunks(q, {"ne\n\n"}).empty());  // "ne" is an unknown field now, not data
}

TEST_CASE("an exception from the callback propagates and leaves the parser failed until reset") {
  SseParser p;
  CHECK_THROWS_AS(p.feed("data: a\n\ndata: b\n\n",
                         [](const SseEvent&) { throw std::runtime_error("consumer failed"); }),
                  std::runtime_error);
  CHECK(p.failed());
  p.reset();
  CHECK(feed_chunks(p, {"data: b\n\n"}).size() == 1);
}

TEST_CASE("feed takes lambdas, const callables and plain functions") {
  SseParser p;
  int n = 0;
  const auto counter = [&n](const SseEvent&) { ++n; };
  p.feed("data: 1\n\n", counter);
  p.feed("data: 2\n\n", collect_free_function);
  p.feed("data: 3\n\n", &collect_free_function);
  CHECK(n == 1);
  CHECK(free_function_events == 2);
  CHECK_FALSE(p.failed());
}

TEST_CASE("random chunkings of random streams give the same events as the whole stream") {
  // Streams are generated together with the events they must produce, then fed whole, byte by
  // byte and in many random splits (including empty chunks).
  std::mt19937_64 rng(20240501);
  const std::vector<std::string> value_alphabet{"a", "b", " ", ":", "{", "\"", "\xC3\xA9", "\t", "x y", "[DONE]"};
  const std::vector<std::string> names{"data", "event", "id", "retry", "foo", "dat"};
  auto pick = [&](auto& v) -> const auto& {
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };

  for (int iteration = 0; iteration < 300; ++iteration) {
    std::string stream;
    std::vector<Ev> want;
    std::string last_break;  // so a CR break is never followed by an LF blank line (that is CRLF)
    auto line_break = [&](bool blank) {
      static const std::string breaks[] = {"\n", "\r\n", "\r"};
      std::string b = breaks[std::uniform_int_distribution<int>(0, 2)(rng)];
      if (blank && last_break == "\r" && b == "\n") b = "\r\n";
      last_break = b;
      return b;
    };
    auto value = [&] {
      std::string v;
      const int n = std::uniform_int_distribution<int>(0, 6)(rng);
      for (int i = 0; i < n; ++i) v += pick(value_alphabet);
      return v;
    };
    if (chance(0.3)) stream += "\xEF\xBB\xBF";
    std::string id;
    const int events = std::uniform_int_distribution<int>(0, 8)(rng);
    for (int e = 0; e < events; ++e) {
      std::string type;
      std::string data;
      bool has_data = false;
      const int lines = std::uniform_int_distribution<int>(0, 5)(rng);
      for (int l = 0; l < lines; ++l) {
        if (chance(0.15)) {
          stream += ":" + value() + line_break(false);
          continue;
        }
        const std::string& name = pick(names);
        const std::string v = value();
        const bool no_colon = v.empty() && chance(0.3);
        const bool space = chance(0.7);
        stream += no_colon ? name : name + ":" + (space ? " " : "") + v;
        stream += line_break(false);
        // The value as the parser must see it: one leading space after the colon stripped.
        const std::string seen = !space && !v.empty() && v[0] == ' ' ? v.substr(1) : v;
        if (name == "data") {
          if (has_data) data += "\n";
          data += seen;
          has_data = true;
        } else if (name == "event") {
          type = seen;
        } else if (name == "id") {
          id = seen;
        }
      }
      stream += line_break(true);
      if (has_data) want.push_back({type, data, id});
    }
    if (chance(0.3)) stream += "data: never dispatched";

    INFO("iteration " << iteration << " stream: " << stream);
    const std::vector<Ev> whole = parse(stream);
    REQUIRE(whole == want);
    REQUIRE(parse_bytewise(stream) == want);
    for (int split = 0; split < 20; ++split) REQUIRE(parse_split(stream, rng, 1 + split % 7) == want);
  }
}
