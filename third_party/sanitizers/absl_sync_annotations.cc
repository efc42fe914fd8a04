// ThreadSanitizer's view of Debian's absl synchronization primitives.
//
// Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so TSan never sees an
// absl::Mutex being taken or released (its fast path is an atomic in uninstrumented code) and
// reports every access to data guarded by one as a race. The tsan config (.bazelrc) links this
// library into every binary and wraps (ld --wrap) each entry point our code calls: before the real
// call a release, after it an acquire, on the primitive's address. Every operation on one mutex,
// condition variable, notification or counter is then ordered after the ones before it, which is
// more order than the primitive gives (two readers, say) but never less, so no real handoff is
// missed and a race on data touched without the primitive is still reported.
//
// absl evaluates a Condition inside its own code, with the mutex held but before our acquire: the
// waiting thread itself (once woken) or the thread unlocking. So LockWhen and Await pass absl a
// Condition of ours that acquires first and then evaluates the caller's, and Unlock acquires
// before unlocking. Notification::HasBeenNotified is inline (an instrumented atomic load of
// notified_yet_), so Notify also releases on that member.
//
// Calls made from inside other uninstrumented libraries (gRPC's own locks) are not wrapped; what
// those libraries touch through intercepted functions (memmove, epoll_wait) is left out of the
// reports (ignore_noninstrumented_modules, in the defaults below).
#include <sanitizer/tsan_interface.h>

#include <cstddef>
#include <cstdint>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

void Release(const void* p) { __tsan_release(const_cast<void*>(p)); }
void Acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }

// Notification's layout in absl 20220623: a Mutex, then std::atomic<bool> notified_yet_.
const void* NotifiedYet(const Notification* n) {
  return reinterpret_cast<const char*>(n) + sizeof(Mutex);
}
static_assert(sizeof(Notification) >= sizeof(Mutex) + sizeof(bool),
              "absl::Notification's layout changed: update NotifiedYet");

// The caller's Condition, evaluated in its mutex's order (absl holds the mutex while it runs).
struct Guarded {
  Guarded(Mutex* mu, const Condition* cond)
      : mu(mu), cond(cond), condition(+[](Guarded* g) { return g->Eval(); }, this) {}
  bool Eval() const {
    Acquire(mu);
    const bool met = cond->Eval();
    Release(mu);  // if not met, absl lets the mutex go without another word to us
    return met;
  }
  Mutex* const mu;
  const Condition* const cond;
  const Condition condition;
};

}  // namespace

// The real functions (__real_<symbol>) and ours (__wrap_<symbol>); members take `this` first.
extern "C" {

// TSAN_OPTIONS still overrides these.
const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1";
}

// gRPC's callback API is inline code in its headers (instrumented in our binaries) handing calls
// between threads through its core (uninstrumented, in libgrpc): TSan sees the two halves of one
// call race. A report with gRPC's code on either stack is left out; so, unavoidably, is a race in
// our code while it runs inside a gRPC callback. What runs on our own threads is still checked.
const char* __tsan_default_suppressions() { return "race:grpc::\nrace:grpc_core::\n"; }

// absl::Mutex
void __real__ZN4absl7debian35Mutex4LockEv(Mutex*);
void __wrap__ZN4absl7debian35Mutex4LockEv(Mutex* mu) {
  Release(mu);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  Acquire(mu);
}
void __real__ZN4absl7debian35Mutex10ReaderLockEv(Mutex*);
void __wrap__ZN4absl7debian35Mutex10ReaderLockEv(Mutex* mu) {
  Release(mu);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  Acquire(mu);
}
bool __real__ZN4absl7debian35Mutex7TryLockEv(Mutex*);
bool __wrap__ZN4absl7debian35Mutex7TryLockEv(Mutex* mu) {
  Release(mu);
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  Acquire(mu);
  return locked;
}
bool __real__ZN4absl7debian35Mutex13ReaderTryLockEv(Mutex*);
bool __wrap__ZN4absl7debian35Mutex13ReaderTryLockEv(Mutex* mu) {
  Release(mu);
  const bool locked = __real__ZN4absl7debian35Mutex13ReaderTryLockEv(mu);
  Acquire(mu);
  return locked;
}
void __real__ZN4absl7debian35Mutex6UnlockEv(Mutex*);
void __wrap__ZN4absl7debian35Mutex6UnlockEv(Mutex* mu) {
  Acquire(mu);
  Release(mu);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
}
void __real__ZN4absl7debian35Mutex12ReaderUnlockEv(Mutex*);
void __wrap__ZN4absl7debian35Mutex12ReaderUnlockEv(Mutex* mu) {
  Acquire(mu);
  Release(mu);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
}
void __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(Mutex*, const Condition&);
void __wrap__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(Mutex* mu, const Condition& c) {
  const Guarded g(mu, &c);
  Release(mu);
  __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(mu, g.condition);
  Acquire(mu);
}
void __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(Mutex*, const Condition&);
void __wrap__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(Mutex* mu,
                                                                     const Condition& c) {
  const Guarded g(mu, &c);
  Release(mu);
  __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(mu, g.condition);
  Acquire(mu);
}
bool __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex*, const Condition&, Duration);
bool __wrap__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration d) {
  const Guarded g(mu, &c);
  Release(mu);
  const bool met =
      __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
          mu, g.condition, d);
  Acquire(mu);
  return met;
}
bool __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex*, const Condition&, Time);
bool __wrap__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time t) {
  const Guarded g(mu, &c);
  Release(mu);
  const bool met = __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
      mu, g.condition, t);
  Acquire(mu);
  return met;
}
bool __real__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex*, const Condition&, Duration);
bool __wrap__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration d) {
  const Guarded g(mu, &c);
  Release(mu);
  const bool met =
      __real__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
          mu, g.condition, d);
  Acquire(mu);
  return met;
}
bool __real__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex*, const Condition&, Time);
bool __wrap__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time t) {
  const Guarded g(mu, &c);
  Release(mu);
  const bool met =
      __real__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
          mu, g.condition, t);
  Acquire(mu);
  return met;
}
void __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(Mutex*, const Condition&);
void __wrap__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(Mutex* mu, const Condition& c) {
  const Guarded g(mu, &c);
  Release(mu);
  __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(mu, g.condition);
  Acquire(mu);
}
bool __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex*, const Condition&, Duration);
bool __wrap__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration d) {
  const Guarded g(mu, &c);
  Release(mu);
  const bool met = __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
      mu, g.condition, d);
  Acquire(mu);
  return met;
}
bool __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex*, const Condition&, Time);
bool __wrap__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time t) {
  const Guarded g(mu, &c);
  Release(mu);
  const bool met = __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
      mu, g.condition, t);
  Acquire(mu);
  return met;
}

// absl::CondVar: waiting releases the mutex and takes it again.
void __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(CondVar*, Mutex*);
void __wrap__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(CondVar* cv, Mutex* mu) {
  Release(mu);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
  Acquire(mu);
}
bool __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(CondVar*, Mutex*,
                                                                                 Duration);
bool __wrap__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(CondVar* cv,
                                                                                 Mutex* mu,
                                                                                 Duration d) {
  Release(mu);
  const bool timed_out =
      __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(cv, mu, d);
  Acquire(mu);
  return timed_out;
}
bool __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(CondVar*, Mutex*,
                                                                              Time);
bool __wrap__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(CondVar* cv,
                                                                              Mutex* mu, Time t) {
  Release(mu);
  const bool timed_out =
      __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(cv, mu, t);
  Acquire(mu);
  return timed_out;
}

// absl::Notification
void __real__ZN4absl7debian312Notification6NotifyEv(Notification*);
void __wrap__ZN4absl7debian312Notification6NotifyEv(Notification* n) {
  Release(n);
  Release(NotifiedYet(n));
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}
void __real__ZNK4absl7debian312Notification19WaitForNotificationEv(const Notification*);
void __wrap__ZNK4absl7debian312Notification19WaitForNotificationEv(const Notification* n) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  Acquire(n);
}
bool __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
    const Notification*, Duration);
bool __wrap__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
    const Notification* n, Duration d) {
  const bool notified =
      __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(n, d);
  Acquire(n);
  return notified;
}
bool __real__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
    const Notification*, Time);
bool __wrap__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
    const Notification* n, Time t) {
  const bool notified =
      __real__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(n, t);
  Acquire(n);
  return notified;
}

// absl::BlockingCounter
bool __real__ZN4absl7debian315BlockingCounter14DecrementCountEv(absl::BlockingCounter*);
bool __wrap__ZN4absl7debian315BlockingCounter14DecrementCountEv(absl::BlockingCounter* b) {
  Release(b);
  const bool last = __real__ZN4absl7debian315BlockingCounter14DecrementCountEv(b);
  Acquire(b);
  return last;
}
void __real__ZN4absl7debian315BlockingCounter4WaitEv(absl::BlockingCounter*);
void __wrap__ZN4absl7debian315BlockingCounter4WaitEv(absl::BlockingCounter* b) {
  __real__ZN4absl7debian315BlockingCounter4WaitEv(b);
  Acquire(b);
}

}  // extern "C"
