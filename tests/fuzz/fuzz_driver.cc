// A small stand-in for libFuzzer, so every fuzz target also runs under g++ and in CI: it runs
// each file of the seed corpus, then random mutations of them (bit and byte flips, insertions,
// deletions, truncations, duplications, splices of two entries) until the time budget is spent.
// Not coverage-guided; `-DSHOAL_FUZZ=ON` with clang builds the same targets on real libFuzzer.
//
//   fuzz_x [-seconds=N] [-seed=N] [-max_len=N] CORPUS_DIR_OR_FILE...
//   (or SHOAL_FUZZ_SECONDS / SHOAL_FUZZ_SEED / SHOAL_FUZZ_MAX_LEN; defaults 5 s, time, 64 KiB)
//
// When an input crashes the target (a signal, a sanitizer report, a per-input timeout of
// SHOAL_FUZZ_TIMEOUT seconds, default 10), the input is written to ./crash-<hash> (or under
// $SHOAL_FUZZ_ARTIFACTS) and printed in hex, so a CI log is enough to reproduce it:
//   fuzz_x crash-<hash>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// Provided by the sanitizer runtimes when they are linked in; called before they exit.
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)());

namespace {

using Input = std::vector<uint8_t>;

// The input being run, for the crash handlers. Written before every run.
const Input* g_current = nullptr;
const char* g_artifacts = nullptr;
unsigned g_timeout_s = 10;

uint64_t Fnv1a(const Input& in) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : in) h = (h ^ b) * 1099511628211ull;
  return h;
}

// Async-signal-safe enough for a dying process: no allocation, write(2) only.
void WriteRaw(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void DumpCurrentInput() {
  static bool dumped = false;
  if (dumped || g_current == nullptr) return;
  dumped = true;
  const Input& in = *g_current;
  char path[512];
  snprintf(path, sizeof path, "%s%scrash-%016llx", g_artifacts ? g_artifacts : "",
           g_artifacts ? "/" : "", static_cast<unsigned long long>(Fnv1a(in)));
  FILE* f = fopen(path, "wb");
  if (f != nullptr) {
    fwrite(in.data(), 1, in.size(), f);
    fclose(f);
  }
  char line[640];
  const int n =
      snprintf(line, sizeof line, "\n== fuzz_driver: crashing input (%zu bytes) saved to %s\n",
               in.size(), path);
  WriteRaw(2, line, static_cast<size_t>(n));
  static const char kHex[] = "0123456789abcdef";
  const size_t shown = std::min<size_t>(in.size(), 4096);
  for (size_t i = 0; i < shown; ++i) {
    const char h[2] = {kHex[in[i] >> 4], kHex[in[i] & 15]};
    WriteRaw(2, h, 2);
  }
  WriteRaw(2, shown < in.size() ? "...\n" : "\n", shown < in.size() ? 4 : 1);
}

void OnFatalSignal(int sig) {
  if (sig == SIGALRM) {
    char line[128];
    const int n =
        snprintf(line, sizeof line, "\n== fuzz_driver: input ran longer than %u s\n", g_timeout_s);
    WriteRaw(2, line, static_cast<size_t>(n));
  }
  DumpCurrentInput();
  signal(sig, SIG_DFL);
  if (sig == SIGALRM) sig = SIGABRT;
  raise(sig);
}

void InstallHandlers() {
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(&DumpCurrentInput);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) signal(sig, &OnFatalSignal);
}

void RunOne(const Input& in) {
  g_current = &in;
  itimerval t{};
  t.it_value.tv_sec = g_timeout_s;
  setitimer(ITIMER_REAL, &t, nullptr);
  // An empty vector's data() may be null; libFuzzer never passes null, so neither do we.
  static const uint8_t kEmpty = 0;
  LLVMFuzzerTestOneInput(in.empty() ? &kEmpty : in.data(), in.size());
  t.it_value.tv_sec = 0;
  setitimer(ITIMER_REAL, &t, nullptr);
  g_current = nullptr;
}

class Mutator {
 public:
  Mutator(uint64_t seed, size_t max_len, const std::vector<Input>& corpus)
      : rng_(seed), max_len_(max_len), corpus_(corpus) {}

  Input Next() {
    Input in = corpus_.empty() ? Input{} : corpus_[Below(corpus_.size())];
    const unsigned steps = 1 + static_cast<unsigned>(Below(8));
    for (unsigned i = 0; i < steps; ++i) Mutate(in);
    if (in.size() > max_len_) in.resize(max_len_);
    return in;
  }

 private:
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  uint8_t InterestingByte() {
    static constexpr uint8_t kBytes[] = {0,   1,   0x7f, 0x80, 0xff, '\n', '\r', ' ', ':',
                                         '-', '{', '}',  '[',  ']',  '"',  '\'', '0', '9',
                                         '&', '*', '!',  '%',  '?',  '=',  '/',  '\\'};
    return rng_() % 2 ? static_cast<uint8_t>(rng_()) : kBytes[Below(sizeof kBytes)];
  }

  void Mutate(Input& in) {
    switch (Below(9)) {
      case 0:  // flip a bit
        if (!in.empty()) in[Below(in.size())] ^= static_cast<uint8_t>(1u << Below(8));
        break;
      case 1:  // set a byte
        if (!in.empty()) in[Below(in.size())] = InterestingByte();
        break;
      case 2: {  // insert a few bytes
        const size_t pos = Below(in.size() + 1);
        const size_t n = 1 + Below(8);
        Input ins(n);
        for (auto& b : ins) b = InterestingByte();
        in.insert(in.begin() + static_cast<ptrdiff_t>(pos), ins.begin(), ins.end());
        break;
      }
      case 3: {  // delete a range
        if (in.empty()) break;
        const size_t pos = Below(in.size());
        const size_t n = 1 + Below(std::min<size_t>(in.size() - pos, 16));
        in.erase(in.begin() + static_cast<ptrdiff_t>(pos),
                 in.begin() + static_cast<ptrdiff_t>(pos + n));
        break;
      }
      case 4:  // truncate
        in.resize(Below(in.size() + 1));
        break;
      case 5: {  // duplicate a range in place
        if (in.empty()) break;
        const size_t pos = Below(in.size());
        const size_t n = 1 + Below(std::min<size_t>(in.size() - pos, 64));
        const Input copy(in.begin() + static_cast<ptrdiff_t>(pos),
                         in.begin() + static_cast<ptrdiff_t>(pos + n));
        const size_t at = Below(in.size() + 1);
        in.insert(in.begin() + static_cast<ptrdiff_t>(at), copy.begin(), copy.end());
        break;
      }
      case 6: {  // splice: our head, another entry's tail
        if (corpus_.empty()) break;
        const Input& other = corpus_[Below(corpus_.size())];
        in.resize(Below(in.size() + 1));
        const size_t from = Below(other.size() + 1);
        in.insert(in.end(), other.begin() + static_cast<ptrdiff_t>(from), other.end());
        break;
      }
      case 7: {  // insert a piece of another entry (its tokens act as a dictionary)
        if (corpus_.empty()) break;
        const Input& other = corpus_[Below(corpus_.size())];
        if (other.empty()) break;
        const size_t from = Below(other.size());
        const size_t n = 1 + Below(std::min<size_t>(other.size() - from, 32));
        const size_t at = Below(in.size() + 1);
        in.insert(in.begin() + static_cast<ptrdiff_t>(at),
                  other.begin() + static_cast<ptrdiff_t>(from),
                  other.begin() + static_cast<ptrdiff_t>(from + n));
        break;
      }
      case 8: {  // overwrite an integer-sized field with an edge value
        if (in.size() < 8) break;
        static constexpr uint64_t kValues[] = {
            0, 1, 0x7f, 0xff, 0x7fff, 0xffff, 0x7fffffff, 0xffffffff, ~0ull, 1ull << 63, 64, 4096};
        const uint64_t v = kValues[Below(std::size(kValues))];
        const size_t width = size_t{1} << Below(4);
        const size_t pos = Below(in.size() - width + 1);
        std::memcpy(&in[pos], &v, width);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  size_t max_len_;
  const std::vector<Input>& corpus_;
};

bool ReadInput(const std::filesystem::path& p, Input* out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  double seconds = static_cast<double>(EnvOr("SHOAL_FUZZ_SECONDS", 5));
  uint64_t seed =
      EnvOr("SHOAL_FUZZ_SEED",
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  size_t max_len = EnvOr("SHOAL_FUZZ_MAX_LEN", 64 * 1024);
  g_timeout_s = static_cast<unsigned>(EnvOr("SHOAL_FUZZ_TIMEOUT", 10));
  g_artifacts = getenv("SHOAL_FUZZ_ARTIFACTS");

  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-seconds=", 0) == 0)
      seconds = std::atof(a.c_str() + 9);
    else if (a.rfind("-seed=", 0) == 0)
      seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    else if (a.rfind("-max_len=", 0) == 0)
      max_len = std::strtoull(a.c_str() + 9, nullptr, 10);
    else if (a.rfind("-", 0) == 0) {
      fprintf(stderr, "fuzz_driver: unknown flag %s\n", a.c_str());
      return 2;
    } else {
      paths.emplace_back(a);
    }
  }

  std::vector<Input> corpus;
  std::error_code ec;
  for (const auto& p : paths) {
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      Input in;
      if (!ReadInput(f, &in)) {
        fprintf(stderr, "fuzz_driver: cannot read %s\n", f.c_str());
        return 2;
      }
      corpus.push_back(std::move(in));
    }
  }

  InstallHandlers();
  for (const Input& in : corpus) RunOne(in);
  fprintf(stderr, "fuzz_driver: %zu corpus input(s) ran clean; mutating for %.1f s (seed %llu)\n",
          corpus.size(), seconds, static_cast<unsigned long long>(seed));

  Mutator mutator(seed, max_len, corpus);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const Input in = mutator.Next();
    RunOne(in);
    ++runs;
  }
  fprintf(stderr, "fuzz_driver: %llu mutated input(s) ran clean\n",
          static_cast<unsigned long long>(runs));
  return 0;
}
