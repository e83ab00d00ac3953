// Parsers on hostile input: 20,000 random or mutated bodies and streams (fixed seed) go into the
// SSE parser, both parse_response functions and both stream accumulators. Asserted: no crash, no
// exception, and invariants that hold for any input.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "laneq/error.hpp"
#include "laneq/providers/anthropic_format.hpp"
#include "laneq/providers/openai_format.hpp"
#include "laneq/sse.hpp"

using laneq::Response;
using laneq::SseEvent;
using laneq::SseParser;

namespace {

constexpr int kInputs = 20'000;

const std::vector<std::string> seed_bodies{
    R"j({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}})j",
    R"j({"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":-4}})j",
    R"j({"error":{"message":"Request too large for gpt-4o on tokens per min (TPM)","type":"tokens","param":null,"code":"rate_limit_exceeded"}})j",
    R"j({"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}})j",
    R"j({"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hello"},{"type":"tool_use","id":"t","name":"f","input":{}},{"type":"text","text":"!"}],"stop_reason":"end_turn","usage":{"input_tokens":9223372036854775807,"cache_creation_input_tokens":9223372036854775807,"cache_read_input_tokens":5,"output_tokens":7}})j",
    R"j({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})j",
    R"j({"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}})j",
    "<html><head><title>502 Bad Gateway</title></head></html>",
};

const std::vector<std::string> seed_streams{
    // OpenAI, with the usage chunk and [DONE]
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}],\"usage\":null}\n\n"
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n"
    "data: [DONE]\n\n",
    // OpenAI with CRLF, an error chunk
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\r\n\r\n"
    "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\r\n\r\n",
    // Anthropic, complete
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: ping\ndata: {\"type\": \"ping\"}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    // Anthropic, an error event after content, CR line endings, a BOM
    "\xEF\xBB\xBF" "event: content_block_delta\rdata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"par\"}}\r\r"
    "event: error\rdata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\r\r",
};

const std::vector<std::string> dictionary{
    "\n", "\r", "\r\n", "\n\n", "data: ", "data:", "event: ", "id: ", ":", " ", "{", "}", "[", "]",
    "\"", ",", "null", "true", "0", "-1", "1e400", "18446744073709551616", "[DONE]", "\xEF\xBB\xBF",
    "\xFF", std::string(1, '\0'), "\"choices\":", "\"content\":", "\"usage\":", "\"error\":",
    "event: error\n", "event: message_stop\n", "\"text_delta\"", "\\u0000", "\\ud800"};

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto below = [&](std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  // Mostly one mutation: a body that is still nearly valid reaches deeper than noise does.
  const std::size_t mutations = below(3) == 0 ? 2 + below(5) : 1;
  for (std::size_t m = 0; m < mutations; ++m) {
    switch (below(7)) {
      case 0:  // flip one bit
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
        break;
      case 1:  // replace a byte
        if (!s.empty()) s[below(s.size())] = static_cast<char>(below(256));
        break;
      case 2:  // truncate
        s.resize(below(s.size() + 1));
        break;
      case 3: {  // insert random bytes
        std::string junk(1 + below(8), '\0');
        for (char& c : junk) c = static_cast<char>(below(256));
        s.insert(below(s.size() + 1), junk);
        break;
      }
      case 4:  // insert a token the parsers care about
        s.insert(below(s.size() + 1), dictionary[below(dictionary.size())]);
        break;
      case 5: {  // delete a slice
        const std::size_t at = below(s.size() + 1);
        s.erase(at, below(32));
        break;
      }
      default: {  // duplicate a slice elsewhere
        const std::size_t at = below(s.size() + 1);
        const std::string slice = s.substr(at, below(64));
        s.insert(below(s.size() + 1), slice);
        break;
      }
    }
  }
  return s;
}

std::string printable(std::string_view s) {
  std::ostringstream os;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') os << c;
    else os << "\\x" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
  }
  return os.str();
}

struct Ev {
  std::string event, data, id;
  bool operator==(const Ev&) const = default;
};

// The first broken invariant, with the input that broke it; Catch reports it once.
struct Violations {
  int count = 0;
  std::string first{};
  void check(bool ok, std::string_view what, int iteration, std::string_view input) {
    if (ok) return;
    if (count++ == 0)
      first = std::string(what) + " (iteration " + std::to_string(iteration) + ", input \"" + printable(input) + "\")";
  }
};

bool is_laneq(std::error_code ec) { return ec.category() == laneq::error_category(); }

template <class Parse>
void check_parse_response(Parse parse, int status, const std::string& input, int it, Violations& v,
                          int& successes) {
  const laneq::Headers headers{{"x-request-id", "r"}};
  Response out;
  out.text = "stale";
  out.attempts = 7;
  const std::error_code ec = parse(status, headers, input, out);  // noexcept: a throw terminates
  v.check(out.status == status, "parse_response sets the status", it, input);
  v.check(out.headers == headers, "parse_response copies the headers", it, input);
  v.check(out.attempts == 7, "parse_response leaves the queue's fields", it, input);
  v.check(out.usage.input_tokens >= 0 && out.usage.output_tokens >= 0, "usage is never negative", it, input);
  if (!ec) {
    ++successes;
    v.check(status >= 200 && status <= 299, "success implies a 2xx status", it, input);
    v.check(out.raw.is_object(), "success implies a JSON object body", it, input);
    v.check(out.error_type.empty() && out.error_message.empty(), "success has no error fields", it, input);
  } else {
    v.check(is_laneq(ec), "errors are laneq codes", it, input);
    v.check(out.text.empty() || (status >= 200 && status <= 299), "a failure status has no text", it, input);
    if ((status < 200 || status > 299) && out.raw.is_null())
      v.check(out.error_message == input.substr(0, 512), "a non-JSON error body becomes the message", it, input);
  }
  if (status < 200 || status > 599) v.check(ec == laneq::errc::malformed_response, "odd statuses are malformed", it, input);
}

template <class Acc>
void check_accumulator(const std::vector<Ev>& events, const std::string& input, int it, Violations& v,
                       int& successes) {
  std::string deltas;
  Acc acc([&](std::string_view d) { deltas += d; });
  try {
    for (const Ev& e : events) acc.on_event(SseEvent{e.event, e.data, e.id});
  } catch (...) {
    v.check(false, "on_event does not throw", it, input);
    return;
  }
  v.check(deltas == acc.text(), "the deltas add up to the text", it, input);
  const bool done = acc.done();
  const std::error_code error = acc.error();
  Response out;
  const std::error_code ec = acc.finish(out);
  v.check(out.text == deltas, "finish hands over the text, partial or not", it, input);
  v.check(out.usage.input_tokens >= 0 && out.usage.output_tokens >= 0, "stream usage is never negative", it, input);
  if (!ec) {
    ++successes;
    v.check(done, "a stream only succeeds when it completed", it, input);
  } else {
    v.check(is_laneq(ec), "stream errors are laneq codes", it, input);
    v.check(error ? ec == error : ec == laneq::errc::network, "finish reports the stream error, else network", it, input);
  }
}

}  // namespace

TEST_CASE("20000 random and mutated inputs never crash or throw, and keep every invariant") {
  std::mt19937_64 rng(0x1A7E0);
  auto below = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  const std::vector<int> statuses{200, 201, 204, 400, 401, 403, 404, 408, 409, 413, 422, 429,
                                  500, 502, 503, 529, 302, 101, 0, -1, 99999};
  const std::vector<std::size_t> line_limits{16, 64, 256, SseParser::default_max_line,
                                             SseParser::default_max_line, SseParser::default_max_line};

  Violations v;
  int openai_ok = 0, anthropic_ok = 0, openai_stream_ok = 0, anthropic_stream_ok = 0, sse_failed = 0,
      events_seen = 0;
  for (int it = 0; it < kInputs; ++it) {
    std::string input;
    const std::size_t kind = below(10);
    if (kind == 0) {  // pure noise
      input.resize(below(300));
      for (char& c : input) c = static_cast<char>(below(256));
    } else {
      const bool stream = below(2) == 0;
      const auto& seeds = stream ? seed_streams : seed_bodies;
      input = seeds[below(seeds.size())];
      // A few seeds go in intact (with a fresh status, line limit and chunking) so the success
      // paths are held to the same invariants.
      if (kind != 1) input = mutate(std::move(input), rng);
    }

    // Responses, both providers.
    const int status = below(2) == 0 ? 200 : statuses[below(statuses.size())];
    check_parse_response(laneq::openai::parse_response, status, input, it, v, openai_ok);
    check_parse_response(laneq::anthropic::parse_response, status, input, it, v, anthropic_ok);

    // SSE: the whole input and a random chunking agree, within the limit.
    const std::size_t limit = line_limits[below(line_limits.size())];
    std::vector<Ev> whole;
    std::vector<Ev> chunked;
    SseParser a(limit);
    SseParser b(limit);
    try {
      a.feed(input, [&](const SseEvent& e) { whole.push_back({e.event, e.data, e.id}); });
      for (std::size_t i = 0; i < input.size();) {
        const std::size_t n = below(17);
        b.feed(std::string_view(input).substr(i, n),
               [&](const SseEvent& e) { chunked.push_back({e.event, e.data, e.id}); });
        v.check(b.failed() || b.buffered() <= 3 * limit + 4, "the parser's buffer stays bounded", it, input);
        i += n;
      }
    } catch (...) {
      v.check(false, "SseParser::feed does not throw", it, input);
    }
    v.check(whole == chunked, "chunking does not change the events", it, input);
    v.check(a.failed() == b.failed(), "chunking does not change failure", it, input);
    for (const Ev& e : whole) v.check(e.data.size() <= limit, "event data stays within the limit", it, input);
    if (a.failed()) {
      ++sse_failed;
      v.check(a.buffered() == 0, "a failed parser holds nothing", it, input);
    }
    events_seen += static_cast<int>(whole.size());

    // Accumulators, both providers, on whatever events came out.
    check_accumulator<laneq::openai::StreamAccumulator>(whole, input, it, v, openai_stream_ok);
    check_accumulator<laneq::anthropic::StreamAccumulator>(whole, input, it, v, anthropic_stream_ok);
  }

  INFO(v.first);
  CHECK(v.count == 0);
  // The inputs must reach every path, or the invariants above were checked on nothing.
  INFO("openai ok " << openai_ok << ", anthropic ok " << anthropic_ok << ", openai streams ok "
                    << openai_stream_ok << ", anthropic streams ok " << anthropic_stream_ok
                    << ", sse failures " << sse_failed << ", events " << events_seen);
  CHECK(openai_ok > 100);
  CHECK(anthropic_ok > 100);
  CHECK(openai_stream_ok > 100);
  CHECK(anthropic_stream_ok > 100);
  CHECK(sse_failed > 100);
  CHECK(events_seen > 10'000);
}
