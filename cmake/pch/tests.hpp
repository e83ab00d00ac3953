// Precompiled once for all test binaries (they reuse one PCH): common.hpp plus Catch2.
#pragma once
#include "common.hpp"

#include <catch2/catch.hpp>
