// Clang thread-safety annotations (clang's -Wthread-safety analysis): what a
// mutex guards and which functions need it, written so the compiler checks it.
//
//   class Cache {
//    public:
//     void Put(Key k) EXCLUDES(mu_);        // takes mu_ itself
//    private:
//     void EvictLocked() REQUIRES(mu_);     // caller holds mu_
//     core::Mutex mu_;
//     std::map<Key, Entry> entries_ GUARDED_BY(mu_);
//   };
//
// Under g++ the macros expand to nothing; the clang build that checks them is
// scripts/check-thread-safety (run by .ci/run beside the tests). The capable
// types themselves (Mutex, SharedMutex, the scoped locks, CondVar) are in
// core/mutex.h.
//
// Thread safety: compile-time only.
#pragma once

#if defined(__clang__)
#define PTSTORE_TSA(x) __attribute__((x))
#else
#define PTSTORE_TSA(x)
#endif

// On a class: its objects are a capability (a mutex).
#define CAPABILITY(x) PTSTORE_TSA(capability(x))
// On a class: an RAII object that holds a capability for its lifetime.
#define SCOPED_CAPABILITY PTSTORE_TSA(scoped_lockable)
// On a member: read and written only with the capability held.
#define GUARDED_BY(x) PTSTORE_TSA(guarded_by(x))
// On a pointer member: what it points at is guarded (the pointer is not).
#define PT_GUARDED_BY(x) PTSTORE_TSA(pt_guarded_by(x))
// On a mutex member: taken after (before) the named ones, never the other way.
#define ACQUIRED_AFTER(...) PTSTORE_TSA(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) PTSTORE_TSA(acquired_before(__VA_ARGS__))
// On a function: the caller holds the capability (exclusively / shared).
#define REQUIRES(...) PTSTORE_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) PTSTORE_TSA(requires_shared_capability(__VA_ARGS__))
// On a function: it takes (releases) the capability and returns holding it
// (not holding it).
#define ACQUIRE(...) PTSTORE_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) PTSTORE_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) PTSTORE_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) PTSTORE_TSA(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) PTSTORE_TSA(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) PTSTORE_TSA(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) PTSTORE_TSA(try_acquire_shared_capability(__VA_ARGS__))
// On a function: the caller must not hold the capability (it takes it).
#define EXCLUDES(...) PTSTORE_TSA(locks_excluded(__VA_ARGS__))
// On a function: checks at run time that the capability is held.
#define ASSERT_CAPABILITY(x) PTSTORE_TSA(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) PTSTORE_TSA(assert_shared_capability(x))
// On a function: it returns (a reference to) the named capability.
#define RETURN_CAPABILITY(x) PTSTORE_TSA(lock_returned(x))
// On a function: the analysis does not look inside it. Each use says why in a
// comment (an ordering the analysis cannot express, such as a lock handed
// from one thread to another).
#define NO_THREAD_SAFETY_ANALYSIS PTSTORE_TSA(no_thread_safety_analysis)
