// A robust, process-shared pthread mutex in shared memory and its guard, used by both pool
// backends: a process killed while holding it does not wedge the node.
#pragma once

#include <pthread.h>

#include <cerrno>
#include <cstdint>

namespace shoal::pool_detail {

// Initialises `m` (in shared memory) as robust and process-shared; returns pthread's error.
inline int InitRobustMutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  const int rc = pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
  return rc;
}

// Takes the mutex; on EOWNERDEAD (the holder died) marks it consistent, counts the recovery in
// *recoveries and goes on. The guarded state is changed in short, ordered steps, so what a dead
// holder leaves behind is at worst a buffer nobody holds, which ReclaimHolder sweeps up.
class RobustLockGuard {
 public:
  RobustLockGuard(pthread_mutex_t* m, uint64_t* recoveries) : m_(m) {
    int rc = pthread_mutex_lock(m_);
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(m_);
      ++*recoveries;
      rc = 0;
    }
    locked_ = rc == 0;
  }
  ~RobustLockGuard() {
    if (locked_) pthread_mutex_unlock(m_);
  }
  RobustLockGuard(const RobustLockGuard&) = delete;
  RobustLockGuard& operator=(const RobustLockGuard&) = delete;
  bool locked() const { return locked_; }
  void Abandon() { locked_ = false; }

 private:
  pthread_mutex_t* m_;
  bool locked_ = false;
};

}  // namespace shoal::pool_detail
