#include "shoal/tools/flsim/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "shoal/fl/client/spec_number.h"

namespace shoal::client {
namespace {

using internal::ParseDouble;
using internal::ParseInt;

// Retries of the whole Dirichlet draw before the fix-up that moves samples to small clients.
constexpr int kDirichletMaxDraws = 100;

std::vector<std::vector<uint32_t>> IndicesByClass(std::span<const uint8_t> labels,
                                                  int num_classes) {
  std::vector<std::vector<uint32_t>> by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(uint32_t(i));
  return by_class;
}

// Dirichlet(alpha, ..., alpha) over n outcomes from normalised gamma draws.
std::vector<double> SampleDirichlet(double alpha, int n, std::mt19937_64& rng) {
  std::gamma_distribution<double> gamma(alpha, 1.0);
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (double& v : p) sum += (v = gamma(rng));
  if (!(sum > 0)) {  // every draw underflowed (tiny alpha): all mass on one outcome
    std::fill(p.begin(), p.end(), 0.0);
    p[std::uniform_int_distribution<int>(0, n - 1)(rng)] = 1.0;
    return p;
  }
  for (double& v : p) v /= sum;
  return p;
}

// Appends `idx` split at the cumulative proportions `p` to the clients' lists.
void SplitByProportions(const std::vector<uint32_t>& idx, const std::vector<double>& p,
                        std::vector<std::vector<uint32_t>>& clients) {
  size_t start = 0;
  double cum = 0;
  for (size_t j = 0; j < clients.size(); ++j) {
    cum += p[j];
    size_t end = j + 1 == clients.size() ? idx.size()
                                         : std::min(idx.size(), size_t(cum * double(idx.size())));
    end = std::max(end, start);
    clients[j].insert(clients[j].end(), idx.begin() + std::ptrdiff_t(start),
                      idx.begin() + std::ptrdiff_t(end));
    start = end;
  }
}

std::vector<std::vector<uint32_t>> DirichletSplit(std::span<const uint8_t> labels, int num_classes,
                                                  int num_clients, double alpha, size_t min_samples,
                                                  std::mt19937_64& rng) {
  const auto by_class = IndicesByClass(labels, num_classes);
  const double fair_share = double(labels.size()) / num_clients;
  std::vector<std::vector<uint32_t>> clients;
  for (int draw = 0; draw < kDirichletMaxDraws; ++draw) {
    clients.assign(size_t(num_clients), {});
    for (const auto& cls : by_class) {
      std::vector<uint32_t> idx = cls;
      std::shuffle(idx.begin(), idx.end(), rng);
      std::vector<double> p = SampleDirichlet(alpha, num_clients, rng);
      // As in the usual implementation (NIID-bench): clients already holding their fair share
      // take no more, which keeps client sizes from diverging without bound.
      double sum = 0;
      for (size_t j = 0; j < p.size(); ++j) {
        if (double(clients[j].size()) >= fair_share) p[j] = 0;
        sum += p[j];
      }
      if (sum > 0) {
        for (double& v : p) v /= sum;
      } else {
        std::fill(p.begin(), p.end(), 1.0 / num_clients);
      }
      SplitByProportions(idx, p, clients);
    }
    size_t smallest = labels.size();
    for (const auto& c : clients) smallest = std::min(smallest, c.size());
    if (smallest >= min_samples) return clients;
  }
  // Still short after many draws (tiny alpha, many clients): the largest client gives its
  // samples to the smallest until everyone has the minimum.
  for (;;) {
    auto small = std::min_element(clients.begin(), clients.end(),
                                  [](const auto& a, const auto& b) { return a.size() < b.size(); });
    if (small->size() >= min_samples) break;
    auto large = std::max_element(clients.begin(), clients.end(),
                                  [](const auto& a, const auto& b) { return a.size() < b.size(); });
    small->push_back(large->back());
    large->pop_back();
  }
  return clients;
}

std::vector<std::vector<uint32_t>> IidSplit(size_t n, int num_clients, std::mt19937_64& rng) {
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0U);
  std::shuffle(idx.begin(), idx.end(), rng);
  std::vector<std::vector<uint32_t>> clients(static_cast<size_t>(num_clients));
  for (size_t j = 0; j < clients.size(); ++j) {
    // Sizes differ by at most one.
    const size_t begin = n * j / clients.size(), end = n * (j + 1) / clients.size();
    clients[j].assign(idx.begin() + std::ptrdiff_t(begin), idx.begin() + std::ptrdiff_t(end));
  }
  return clients;
}

std::vector<std::vector<uint32_t>> ClassesSplit(std::span<const uint8_t> labels, int num_classes,
                                                int num_clients, int k, std::mt19937_64& rng) {
  // Client j holds perm[(j*k + i) % C] for i < k: distinct classes per client (k <= C), and
  // every class held by someone once num_clients * k >= C.
  std::vector<int> perm(static_cast<size_t>(num_classes));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int>> holders(static_cast<size_t>(num_classes));
  for (int j = 0; j < num_clients; ++j) {
    for (int i = 0; i < k; ++i)
      holders[size_t(perm[size_t((j * k + i) % num_classes)])].push_back(j);
  }
  auto by_class = IndicesByClass(labels, num_classes);
  std::vector<std::vector<uint32_t>> clients(static_cast<size_t>(num_clients));
  for (size_t c = 0; c < by_class.size(); ++c) {
    auto& idx = by_class[c];
    const auto& h = holders[c];
    if (h.empty()) continue;
    std::shuffle(idx.begin(), idx.end(), rng);
    for (size_t s = 0; s < h.size(); ++s) {
      const size_t begin = idx.size() * s / h.size(), end = idx.size() * (s + 1) / h.size();
      auto& dst = clients[size_t(h[s])];
      dst.insert(dst.end(), idx.begin() + std::ptrdiff_t(begin), idx.begin() + std::ptrdiff_t(end));
    }
  }
  return clients;
}

}  // namespace

Result<PartitionSpec> ParsePartitionSpec(std::string_view spec) {
  const auto [kind, arg, has_arg, where] = internal::SplitSpec(spec, "partition");
  PartitionSpec p;
  if (kind == "iid") {
    if (has_arg) return InvalidArgument(where + "iid takes no argument");
    p.kind = PartitionSpec::Kind::kIid;
  } else if (kind == "dirichlet") {
    auto a = ParseDouble(arg);
    if (!a || !(*a > 0) || !std::isfinite(*a)) {
      return InvalidArgument(where + "alpha \"" + std::string(arg) +
                             "\" must be a positive number (dirichlet:<alpha>)");
    }
    p.kind = PartitionSpec::Kind::kDirichlet;
    p.alpha = *a;
  } else if (kind == "classes") {
    auto k = ParseInt(arg);
    if (!k || *k < 1 || *k > 255) {
      return InvalidArgument(where + "classes per client \"" + std::string(arg) +
                             "\" must be an integer >= 1 (classes:<k>)");
    }
    p.kind = PartitionSpec::Kind::kClasses;
    p.classes_per_client = int(*k);
  } else {
    return InvalidArgument(where + "unknown kind \"" + std::string(kind) +
                           "\" (want iid, dirichlet:<alpha> or classes:<k>)");
  }
  return p;
}

std::string ToString(const PartitionSpec& spec) {
  std::ostringstream os;
  switch (spec.kind) {
    case PartitionSpec::Kind::kIid:
      os << "iid";
      break;
    case PartitionSpec::Kind::kDirichlet:
      os << "dirichlet:" << spec.alpha;
      break;
    case PartitionSpec::Kind::kClasses:
      os << "classes:" << spec.classes_per_client;
      break;
  }
  return os.str();
}

Result<std::vector<std::vector<uint32_t>>> Partition(std::span<const uint8_t> labels,
                                                     int num_classes, int num_clients,
                                                     const PartitionSpec& spec, uint64_t seed,
                                                     const PartitionOptions& options) {
  if (num_clients < 1) return InvalidArgument("partition: need at least one client");
  if (num_classes < 1 || num_classes > 256) {
    return InvalidArgument("partition: num_classes must be in [1, 256]");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return InvalidArgument("partition: label " + std::to_string(labels[i]) + " at index " +
                             std::to_string(i) + " is not below " + std::to_string(num_classes));
    }
  }
  if (labels.size() < size_t(num_clients) * std::max<size_t>(1, options.min_samples_per_client)) {
    return InvalidArgument("partition: " + std::to_string(labels.size()) + " samples cannot give " +
                           std::to_string(num_clients) + " clients at least " +
                           std::to_string(std::max<size_t>(1, options.min_samples_per_client)) +
                           " each");
  }
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint32_t>> clients;
  switch (spec.kind) {
    case PartitionSpec::Kind::kIid:
      clients = IidSplit(labels.size(), num_clients, rng);
      break;
    case PartitionSpec::Kind::kDirichlet:
      if (!(spec.alpha > 0)) return InvalidArgument("partition: dirichlet alpha must be > 0");
      clients = DirichletSplit(labels, num_classes, num_clients, spec.alpha,
                               options.min_samples_per_client, rng);
      break;
    case PartitionSpec::Kind::kClasses:
      if (spec.classes_per_client < 1 || spec.classes_per_client > num_classes) {
        return InvalidArgument("partition " + ToString(spec) +
                               ": classes per client must be in [1, " +
                               std::to_string(num_classes) + "]");
      }
      clients = ClassesSplit(labels, num_classes, num_clients, spec.classes_per_client, rng);
      break;
  }
  for (auto& c : clients) std::sort(c.begin(), c.end());
  return clients;
}

std::vector<size_t> ClassCounts(std::span<const uint8_t> labels, std::span<const uint32_t> indices,
                                int num_classes) {
  std::vector<size_t> counts(size_t(num_classes), 0);
  for (uint32_t i : indices) {
    if (labels[i] < num_classes) ++counts[labels[i]];
  }
  return counts;
}

double LabelEntropy(std::span<const uint8_t> labels, std::span<const uint32_t> indices,
                    int num_classes) {
  const auto counts = ClassCounts(labels, indices, num_classes);
  double total = 0;
  for (size_t c : counts) total += double(c);
  if (total == 0) return 0;
  double h = 0;
  for (size_t c : counts) {
    if (c == 0) continue;
    const double p = double(c) / total;
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace shoal::client
