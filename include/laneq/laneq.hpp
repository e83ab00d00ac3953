#pragma once
// laneq: priority lanes, fair scheduling and rate limiting for AI API calls on Asio.
#include "laneq/error.hpp"
#include "laneq/metrics.hpp"
#include "laneq/priority.hpp"
#include "laneq/provider.hpp"
#include "laneq/rate_budget.hpp"
#include "laneq/rate_limit_headers.hpp"
#include "laneq/request.hpp"
#include "laneq/request_queue.hpp"
#include "laneq/scheduler.hpp"
#include "laneq/simulated_provider.hpp"
#include "laneq/token_estimate.hpp"
