// The benches' command lines: `--name value` options and `--name` switches, each bound to a
// variable that holds its default. Anything else, or an option without its value, prints the
// bench's usage line and Parse returns false (the bench exits 2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace shoal::bench {

class Args {
 public:
  explicit Args(std::string usage) : usage_(std::move(usage)) {}

  // Numbers are read as strtoll / strtoull / strtod read them (not a number: 0); a
  // std::vector<std::string> takes a comma-separated list.
  template <class T>
  Args& Option(const char* name, T* value) {
    flags_.push_back({name, true, [value](const char* v) { Set(value, v); }});
    return *this;
  }
  // --params N, --updates K, --reps R: the fold benches' model size, update count and passes.
  Args& FoldSizes(size_t* params, size_t* updates, int* reps) {
    return Option("--params", params).Option("--updates", updates).Option("--reps", reps);
  }
  // --seeds N, --first-seed S, --max-seconds T: the FL benches' runs (seeds S..S+N-1) and each
  // run's time limit.
  Args& FlRuns(int* seeds, uint64_t* first_seed, double* max_seconds) {
    return Option("--seeds", seeds)
        .Option("--first-seed", first_seed)
        .Option("--max-seconds", max_seconds);
  }
  // `--name` alone sets `*value` to `to`.
  template <class T>
  Args& Switch(const char* name, T* value, T to) {
    flags_.push_back({name, false, [value, to](const char*) { *value = to; }});
    return *this;
  }

  bool Parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const Flag* flag = nullptr;
      for (const Flag& f : flags_) {
        if (f.name == argv[i]) flag = &f;
      }
      if (flag == nullptr || (flag->takes_value && i + 1 >= argc)) return Usage();
      flag->set(flag->takes_value ? argv[++i] : nullptr);
    }
    return true;
  }
  // Prints the usage line; false, for `return args.Usage();` on a value the bench refuses.
  bool Usage() const {
    std::fprintf(stderr, "usage: %s\n", usage_.c_str());
    return false;
  }

 private:
  struct Flag {
    std::string name;
    bool takes_value;
    std::function<void(const char*)> set;
  };
  template <class T>
  static void Set(T* out, const char* v) {
    if constexpr (std::is_same_v<T, std::string>) {
      *out = v;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      out->clear();  // a comma-separated list replaces the default
      std::istringstream items(v);
      for (std::string item; std::getline(items, item, ',');) out->push_back(item);
    } else if constexpr (std::is_floating_point_v<T>) {
      *out = static_cast<T>(std::strtod(v, nullptr));
    } else if constexpr (std::is_signed_v<T>) {
      *out = static_cast<T>(std::strtoll(v, nullptr, 10));
    } else {
      *out = static_cast<T>(std::strtoull(v, nullptr, 10));
    }
  }

  std::string usage_;
  std::vector<Flag> flags_;
};

}  // namespace shoal::bench
