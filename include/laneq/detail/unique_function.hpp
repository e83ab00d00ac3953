#pragma once
// A move-only type-erased callable (std::move_only_function is C++23). Small callables
// (<= 6 pointers) live inline, so storing an Asio handler usually does not allocate.
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace laneq::detail {

template <class Sig>
class unique_function;

template <class R, class... Args>
class unique_function<R(Args...)> {
  static constexpr std::size_t inline_size = 6 * sizeof(void*);

  struct vtable {
    R (*call)(void*, Args&&...);
    void (*move)(void* dst, void* src) noexcept;  // move-construct dst from src, destroy src
    void (*destroy)(void*) noexcept;
  };

  template <class F>
  static constexpr bool fits_inline = sizeof(F) <= inline_size &&
                                      alignof(F) <= alignof(std::max_align_t) &&
                                      std::is_nothrow_move_constructible_v<F>;

  template <class F>
  static const vtable* table_for() {
    if constexpr (fits_inline<F>) {
      static constexpr vtable t{
          [](void* p, Args&&... a) -> R { return (*static_cast<F*>(p))(std::forward<Args>(a)...); },
          [](void* d, void* s) noexcept {
            ::new (d) F(std::move(*static_cast<F*>(s)));
            static_cast<F*>(s)->~F();
          },
          [](void* p) noexcept { static_cast<F*>(p)->~F(); }};
      return &t;
    } else {
      static constexpr vtable t{
          [](void* p, Args&&... a) -> R { return (**static_cast<F**>(p))(std::forward<Args>(a)...); },
          [](void* d, void* s) noexcept { *static_cast<F**>(d) = *static_cast<F**>(s); },
          [](void* p) noexcept { delete *static_cast<F**>(p); }};
      return &t;
    }
  }

 public:
  unique_function() noexcept = default;
  unique_function(std::nullptr_t) noexcept {}

  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, unique_function> &&
                                     std::is_invocable_r_v<R, D&, Args...>>>
  unique_function(F&& f) : vt_(table_for<D>()) {
    if constexpr (fits_inline<D>)
      ::new (static_cast<void*>(&buf_)) D(std::forward<F>(f));
    else
      *reinterpret_cast<D**>(&buf_) = new D(std::forward<F>(f));
  }

  unique_function(unique_function&& o) noexcept : vt_(o.vt_) {
    if (vt_) {
      vt_->move(&buf_, &o.buf_);
      o.vt_ = nullptr;
    }
  }

  unique_function& operator=(unique_function&& o) noexcept {
    if (this != &o) {
      reset();
      vt_ = o.vt_;
      if (vt_) {
        vt_->move(&buf_, &o.buf_);
        o.vt_ = nullptr;
      }
    }
    return *this;
  }

  ~unique_function() { reset(); }

  void reset() noexcept {
    if (vt_) {
      vt_->destroy(&buf_);
      vt_ = nullptr;
    }
  }

  explicit operator bool() const noexcept { return vt_ != nullptr; }

  R operator()(Args... a) { return vt_->call(&buf_, std::forward<Args>(a)...); }

 private:
  const vtable* vt_ = nullptr;
  alignas(std::max_align_t) unsigned char buf_[inline_size];
};

}  // namespace laneq::detail
