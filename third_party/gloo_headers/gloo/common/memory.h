// Stand-in for <gloo/common/memory.h>, which Debian's libgloo-dev 0.0~git20220518 leaves out
// although <gloo/transport/tcp/pair.h> includes it. Our code needs tcp/pair.h only to name
// gloo::transport::tcp::Pair (collective/gloo_group.cc calls one of its methods through a
// pointer to member); it never constructs a Pair or touches its members, whose layout is the
// library's. These are our own declarations of the three names the header provides, with the
// same members (a shared or weak pointer), so the class definitions that mention them compile.
#ifndef PSTRAIN_THIRD_PARTY_GLOO_COMMON_MEMORY_H_
#define PSTRAIN_THIRD_PARTY_GLOO_COMMON_MEMORY_H_

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() = default;
  T* get() const { return ptr_.get(); }
  T* operator->() const { return ptr_.get(); }
  explicit operator bool() const { return static_cast<bool>(ptr_); }

 private:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() = default;

 private:
  std::weak_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr final {
 public:
  ShareableNonOwningPtr() = default;

 private:
  std::shared_ptr<T> ptr_;
};

}  // namespace gloo

#endif  // PSTRAIN_THIRD_PARTY_GLOO_COMMON_MEMORY_H_
