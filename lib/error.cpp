#include "laneq/error.hpp"

namespace laneq {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "laneq"; }

  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::queue_full:
        return "queue_full: the queue holds QueueConfig::max_pending requests; retry later, raise "
               "max_pending, or let the lane wait for room (LaneConfig::when_full = wait)";
      case errc::client_queue_full:
        return "client_queue_full: this client already has QueueConfig::max_pending_per_client "
               "requests queued or waiting for room; wait for some to finish, or raise the limit";
      case errc::timeout:
        return "timeout: the request's deadline (queue wait + call) passed; raise "
               "SubmitOptions::timeout or the lane's default timeout";
      case errc::cancelled: return "cancelled: the caller cancelled the request";
      case errc::shutting_down:
        return "shutting_down: the queue is shutting down and admits or keeps no more requests";
      case errc::unknown_lane:
        return "unknown_lane: SubmitOptions::priority is not one of QueueConfig::lanes";
      case errc::invalid_config:
        return "invalid_config: a configuration value is invalid; the text before this names the "
               "field and what it must be";
      case errc::not_started: return "not_started: call RequestQueue::start() first";
      case errc::exceeds_rate_limit:
        return "exceeds_rate_limit: the request's estimated cost (prompt + max_tokens, or 1 "
               "request) exceeds a rate budget's whole limit, so it could never run; lower "
               "max_tokens, shorten the prompt or raise the limit, or give "
               "QueueConfig::prompt_estimator if the default (~4 bytes a token) misjudges it, as "
               "it does base64 images in Request::extra";
      case errc::rate_limited:
        return "rate_limited: the provider answered 429 (rate limit) until the retries "
               "(QueueConfig::retry) gave up; set QueueConfig::rate_limits to the account's limits "
               "so laneq paces calls below them, or raise retry.max_attempts / max_retry_after";
      case errc::overloaded:
        return "overloaded: the provider is overloaded (529/503) and stayed so through the "
               "retries (QueueConfig::retry); try again later";
      case errc::auth:
        return "auth: the provider rejected the API key (401/403); check the provider config's "
               "api_key or $OPENAI_API_KEY / $ANTHROPIC_API_KEY, and the key's access to the model";
      case errc::bad_request:
        return "bad_request: the request is invalid, refused by laneq before sending (status 0) "
               "or by the provider (400/404/422); Response::error_message says why";
      case errc::request_too_large:
        return "request_too_large: the request exceeds what the provider accepts (its size, or "
               "prompt + max_tokens beyond the account's tokens-per-minute limit), or its prompt "
               "estimate what laneq carries (2^31 - 1 tokens); shorten it or lower max_tokens";
      case errc::quota_exceeded:
        return "quota_exceeded: the account's quota is used up (not a rate limit; do not retry)";
      case errc::server_error:
        return "server_error: the provider failed (5xx) through the retries "
               "(QueueConfig::retry); try again later";
      case errc::network:
        return "network: the connection to the provider failed through the retries; check "
               "base_url, the proxy (https_proxy or CurlTransportConfig::proxy) and "
               "CurlTransportConfig's timeouts; Response::error_message has the transport's words";
      case errc::malformed_response:
        return "malformed_response: the provider's answer could not be parsed; check that "
               "base_url points at an OpenAI- or Anthropic-compatible API (Response::raw and "
               "error_message show what came back)";
      case errc::internal: return "internal: unexpected failure inside laneq or the provider";
      case errc::journal:
        return "journal: the durable journal (SQLite file) could not be opened, read or "
               "written; the exception text or JournalStats::last_error names the file and the "
               "cause";
      case errc::duplicate_id:
        return "duplicate_id: the journal already holds a request with this id; give each "
               "durable request a unique id, or look the earlier one up by its id";
      case errc::no_journal:
        return "no_journal: a durable request (SubmitOptions::durable, async_enqueue) or a result "
               "lookup needs a journal; set QueueConfig::journal to a file";
      case errc::interrupted_too_often:
        return "interrupted_too_often: the process ended (a crash, a kill) while this durable "
               "request's call was in flight, in QueueConfig::max_interrupted_runs runs; it was "
               "given up, as the request itself may be what ends the process; find the cause, "
               "then submit it again under a new id (or raise max_interrupted_runs, 0 = no limit)";
    }
    return "laneq: unknown error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

std::string error_name(std::error_code ec) {
  if (ec.category() != error_category())
    return std::string(ec.category().name()) + ":" + std::to_string(ec.value());
  // Every laneq message starts with its name: "timeout: the request's deadline ...".
  std::string m = ec.message();
  const auto colon = m.find(':');
  return colon == std::string::npos ? m : m.substr(0, colon);
}

}  // namespace laneq
