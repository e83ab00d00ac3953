#pragma once
// ClientId: a tenant name stored inline (up to 63 bytes), trivially copyable.
//
// Why not std::string: GCC 12 (Debian 12's compiler) miscompiles brace-initialized aggregate
// temporaries with owning members that live across a co_await - exactly
// `co_await queue.submit(req, {.client = "tenant-42"})`. A trivially copyable SubmitOptions is
// immune, and an inline copy cannot dangle the way a string_view would.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace laneq {

class ClientId {
 public:
  static constexpr std::size_t max_size = 63;

  constexpr ClientId() noexcept = default;
  constexpr ClientId(std::string_view name) { assign(name); }            // NOLINT: implicit
  constexpr ClientId(const char* name) { assign(std::string_view(name)); }  // NOLINT: implicit
  ClientId(const std::string& name) { assign(std::string_view(name)); }     // NOLINT: implicit

  constexpr std::string_view view() const noexcept { return {data_, size_}; }
  constexpr operator std::string_view() const noexcept { return view(); }  // NOLINT: implicit
  std::string str() const { return std::string(view()); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr std::size_t size() const noexcept { return size_; }

  friend constexpr bool operator==(const ClientId& a, const ClientId& b) noexcept {
    return a.view() == b.view();
  }
  // Against a name of another type (without these, two conversions fit and == is ambiguous).
  friend constexpr bool operator==(const ClientId& a, std::string_view b) noexcept {
    return a.view() == b;
  }
  friend bool operator==(const ClientId& a, const std::string& b) noexcept { return a.view() == b; }
  friend constexpr bool operator==(const ClientId& a, const char* b) noexcept {
    return a.view() == std::string_view(b);
  }

 private:
  constexpr void assign(std::string_view name) {
    if (name.size() > max_size)
      throw std::length_error("laneq::ClientId: client names are limited to 63 bytes, got " +
                              std::to_string(name.size()));
    std::copy(name.begin(), name.end(), data_);
    size_ = static_cast<std::uint8_t>(name.size());
  }

  char data_[max_size] = {};
  std::uint8_t size_ = 0;
};

}  // namespace laneq
