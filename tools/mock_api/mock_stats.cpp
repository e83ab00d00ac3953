#include "mock_api/mock_stats.hpp"

#include <algorithm>
#include <iterator>

namespace laneq::mock {

void MockStats::Window::add(std::int64_t ms) {
  // Threads read the clock before the lock: a start may come in after a later one. Kept in
  // order (it lands near the back), so the oldest leave the window first.
  auto at = slots.end();
  while (at != slots.begin() && std::prev(at)->first > ms) --at;
  if (at != slots.begin() && std::prev(at)->first == ms)
    ++std::prev(at)->second;
  else
    slots.emplace(at, ms, 1);
  ++sum;
  // The window ending at the latest start is (end - span, end]: at millisecond resolution.
  const std::int64_t end = slots.back().first;
  while (slots.front().first <= end - span_ms) {
    sum -= slots.front().second;
    slots.pop_front();
  }
  max = std::max(max, sum);
}

void MockStats::set_max_keys(std::size_t n) {
  std::lock_guard lock(mu_);
  max_keys_ = n;
}

void MockStats::count(Counts& counts, std::string_view key) {
  if (key.empty()) return;
  auto it = counts.find(key);
  if (it == counts.end()) {
    // Bounded cardinality: later new keys share one entry.
    if (counts.size() >= max_keys_) key = "_other";
    it = counts.try_emplace(std::string(key), 0).first;
  }
  ++it->second;
}

void MockStats::connection_opened() {
  std::lock_guard lock(mu_);
  ++accepted_;
  peak_connections_ = std::max(peak_connections_, ++connections_);
  changed();
}

void MockStats::connection_closed() {
  std::lock_guard lock(mu_);
  --connections_;
  changed();
}

void MockStats::call_started(const CallInfo& info, std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mu_);
  ++requests_;
  count(by_path_, info.path);
  count(by_model_, info.model);
  count(by_priority_, info.priority);
  count(by_client_, info.client);
  count(by_api_key_, info.api_key);
  const auto count_id = [&](std::string_view id) {
    if (id.empty()) return;
    const auto it = by_request_id_.find(id);
    if (it != by_request_id_.end() && it->second == 1) ++duplicate_ids_;  // first repeat of this id
    count(by_request_id_, id);
  };
  count_id(info.laneq_id);
  if (info.request_id != info.laneq_id) count_id(info.request_id);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  w1s_.add(ms);
  w60s_.add(ms);
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  changed();
}

void MockStats::call_finished() {
  std::lock_guard lock(mu_);
  --in_flight_;
  changed();
}

void MockStats::status_sent(int status) {
  std::lock_guard lock(mu_);
  count(by_status_, std::to_string(status));
  if (status == 429) ++sent_429_;
  if (status >= 500) ++sent_5xx_;
  changed();
}

void MockStats::reset_sent() {
  std::lock_guard lock(mu_);
  ++resets_;
  changed();
}

void MockStats::injected(std::string_view kind) {
  std::lock_guard lock(mu_);
  count(injected_, kind);
  changed();
}

void MockStats::closed_in_flight() {
  std::lock_guard lock(mu_);
  ++closed_in_flight_;
  changed();
}

void MockStats::waited_for_body() {
  std::lock_guard lock(mu_);
  ++waited_for_body_;
  changed();
}

void MockStats::usage(std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt_tokens;
  completion_tokens_ += completion_tokens;
  changed();
}

nlohmann::json MockStats::to_json_locked() const {
  return {
      {"requests", requests_},
      {"by_path", by_path_},
      {"by_model", by_model_},
      {"by_priority", by_priority_},
      {"by_client", by_client_},
      {"by_api_key", by_api_key_},
      {"by_request_id", by_request_id_},
      {"duplicate_request_ids", duplicate_ids_},
      {"by_status", by_status_},
      {"sent_429", sent_429_},
      {"sent_5xx", sent_5xx_},
      {"resets", resets_},
      {"injected", injected_},
      {"max_in_1s", w1s_.max},
      {"max_in_60s", w60s_.max},
      {"in_flight", in_flight_},
      {"peak_in_flight", peak_in_flight_},
      {"usage", {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_}}},
      {"connections",
       {{"current", connections_},
        {"peak", peak_connections_},
        {"accepted", accepted_},
        {"closed_in_flight", closed_in_flight_},
        {"waited_for_body", waited_for_body_}}},
  };
}

nlohmann::json MockStats::to_json() const {
  std::lock_guard lock(mu_);
  return to_json_locked();
}

void MockStats::reset() {
  std::lock_guard lock(mu_);
  requests_ = 0;
  for (auto* c : {&by_path_, &by_model_, &by_priority_, &by_client_, &by_api_key_,
                  &by_request_id_, &by_status_, &injected_})
    c->clear();
  duplicate_ids_ = sent_429_ = sent_5xx_ = resets_ = 0;
  prompt_tokens_ = completion_tokens_ = 0;
  w1s_ = Window{1000};
  w60s_ = Window{60'000};
  peak_in_flight_ = in_flight_;
  peak_connections_ = connections_;
  accepted_ = closed_in_flight_ = waited_for_body_ = 0;
  changed();
}

bool MockStats::wait(const std::function<bool(const nlohmann::json&)>& pred,
                     std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(to_json_locked()); });
}

}  // namespace laneq::mock
