// WorkerTeam: the fork-join under FoldPool and the robust rules' TaskPool. T - 1 threads are
// started once; each Run wakes them, runs the same function on each of them and on the calling
// thread, and returns when all have returned. A call allocates nothing and creates no thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace shoal::aggregator {

class WorkerTeam {
 public:
  // threads == 0: std::thread::hardware_concurrency() (at least 1). The caller is thread 0.
  explicit WorkerTeam(unsigned threads);
  ~WorkerTeam();
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls work(thread) once on every thread, 0 (the caller) to threads() - 1, and returns once
  // every call has returned. What the caller wrote before Run is visible to every call, and
  // what the calls wrote is visible to the caller after it. One Run at a time.
  template <class Work>
  void Run(Work& work) {
    RunErased(&work, [](void* w, unsigned thread) { (*static_cast<Work*>(w))(thread); });
  }

 private:
  using Call = void (*)(void* work, unsigned thread);
  void RunErased(void* work, Call call);
  void WorkerLoop(unsigned thread);

  std::mutex mu_;
  std::condition_variable wake_;  // workers: a new generation or stop
  std::condition_variable done_;  // caller: every worker finished the generation
  uint64_t generation_ = 0;
  unsigned busy_ = 0;  // workers that have not finished the current generation
  bool stop_ = false;
  void* work_ = nullptr;
  Call call_ = nullptr;
  std::vector<std::thread> workers_;
};

}  // namespace shoal::aggregator
