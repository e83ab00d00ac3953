#pragma once
// The batch file formats of the laneq CLI, pure (no I/O): one input line of the OpenAI Batch
// API format -> a laneq Request, and a result -> one output line of the Batch API output format.
//
// Input:  {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions" | "/v1/messages",
//          "body": {...}, "priority": "critical" | 0, "client": "tenant-a"}
// Output: {"id": "batch_req_...", "custom_id": "...",
//          "response": {"status_code": 200, "request_id": "...", "body": {...}} | null,
//          "error": null | {"code": "rate_limited", "message": "..."}}
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include "laneq/request.hpp"

namespace laneq::cli {

struct LaneName {
  std::string name;  // "critical"
  int priority;      // 0
};

struct BatchLine {
  std::size_t line_no = 0;  // 1-based
  std::string custom_id;
  Request request;          // request.id = custom_id
  int priority = static_cast<int>(Priority::normal);
  std::string client;
};

// A line that cannot run. Its output line carries "line" so it is found again on a resume.
struct BadLine {
  std::size_t line_no = 0;
  std::string custom_id;  // as read, when there was one ("" otherwise)
  std::string code;       // "invalid_json", "missing_custom_id", "duplicate_custom_id", ...
  std::string message;    // "line 7: ..."
};

// Parses one non-empty input line. `lanes` are the lane names "priority" may use (a number
// must be one of their priorities). Duplicate custom_ids are the caller's to find (it sees
// every line); body fields the Request has no member for go to Request::extra.
std::variant<BatchLine, BadLine> parse_batch_line(std::string_view text, std::size_t line_no,
                                                  const std::vector<LaneName>& lanes);

// The Batch API "id" of a custom_id's output line: stable across runs and resumes.
std::string output_id(std::string_view custom_id);

// One output line (no trailing newline). `ec` empty: success. The response part is present
// whenever the provider answered (status != 0); "error" is non-null whenever `ec` is set.
std::string result_line(std::string_view custom_id, std::error_code ec, const Response& r);
std::string bad_line_output(const BadLine& bad);

// What an existing output file line tells a resume: its custom_id, or the input line number of
// a bad line. `complete` is false for a torn (unterminated or unparseable) line.
struct OutputLineKey {
  bool complete = false;
  std::string custom_id;
  std::size_t bad_line_no = 0;  // > 0: the output of a bad input line
  bool succeeded = false;
  // A failure only a call to the provider gives (a response, or a code such as network or
  // rate_limited), as opposed to one refused before it ran (exceeds_rate_limit, ...).
  bool called = false;
  // Failed with code "journal": the journal could not store the line's row (never run) or its
  // outcome (the row stays open); a resume does not take it as the line's last word.
  bool journal_error = false;
};
OutputLineKey read_output_line(std::string_view text);

}  // namespace laneq::cli
