// Where `hios serve` puts its models and their replicas (serve.hpp): the balanced placement over
// devices, the explicit one checked against the models, and the model=value lists of the
// options that name them. Apart from the server because these are pure functions of the
// options and the predicted pass times, decided before anything is built.
#include <algorithm>
#include <cstdlib>

#include "graph/error.hpp"
#include "serve/serve.hpp"

namespace hios::exec {

// ---------------------------------------------------------------------------------------------
// Placement.

std::vector<int> balance_placement(const std::vector<double>& weight_ms, const std::vector<int>& devices) {
  HIOS_CHECK(!devices.empty(), "internal error: no devices to place models on");
  std::vector<size_t> order(weight_ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weight_ms[a] > weight_ms[b]; });
  std::vector<double> load(devices.size(), 0);
  std::vector<int> count(devices.size(), 0);
  std::vector<int> out(weight_ms.size(), -1);
  for (size_t m : order) {
    size_t best = 0;
    for (size_t d = 1; d < devices.size(); ++d) {
      if (load[d] < load[best] || (load[d] == load[best] && count[d] < count[best])) best = d;
    }
    load[best] += weight_ms[m];
    ++count[best];
    out[m] = devices[best];
  }
  return out;
}

std::vector<std::vector<int>> balance_replicas(const std::vector<double>& weight_ms, const std::vector<int>& replicas,
                                               const std::vector<int>& devices) {
  HIOS_CHECK(replicas.size() == weight_ms.size(), "internal error: %zu replica counts for %zu models", replicas.size(),
             weight_ms.size());
  // Every replica an item of the greedy, in model order then replica order, so that its stable
  // sort breaks ties as balance_placement's does for models.
  std::vector<double> item_ms;
  for (size_t m = 0; m < weight_ms.size(); ++m) {
    HIOS_CHECK(replicas[m] >= 1, "internal error: %d replicas of model %zu", replicas[m], m);
    for (int k = 0; k < replicas[m]; ++k) item_ms.push_back(weight_ms[m] / double(replicas[m]));
  }
  const std::vector<int> item_dev = balance_placement(item_ms, devices);
  std::vector<std::vector<int>> out(weight_ms.size());
  size_t i = 0;
  for (size_t m = 0; m < weight_ms.size(); ++m) {
    for (int k = 0; k < replicas[m]; ++k) out[m].push_back(item_dev[i++]);
  }
  return out;
}

std::vector<int> auto_replica_counts(const std::vector<double>& request_ms, int devices) {
  HIOS_CHECK(devices >= 1, "internal error: replicas for %d devices", devices);
  std::vector<int> k(request_ms.size(), 1);
  for (int extra = 0; extra < devices; ++extra) {
    size_t best = k.size();
    for (size_t m = 0; m < k.size(); ++m) {
      if (k[m] >= kMaxReplicas) continue;
      if (best == k.size() || request_ms[m] / k[m] > request_ms[best] / k[best]) best = m;
    }
    if (best == k.size()) break;  // every model at the most
    ++k[best];
  }
  return k;
}

std::vector<std::vector<int>> place_extra_replicas(const std::vector<double>& request_ms, const std::vector<int>& counts,
                                                   const std::vector<int>& first_device, const std::vector<int>& devices) {
  HIOS_CHECK(!devices.empty(), "internal error: no devices to place replicas on");
  HIOS_CHECK(counts.size() == request_ms.size() && first_device.size() == request_ms.size(),
             "internal error: %zu replica counts and %zu first devices for %zu models", counts.size(), first_device.size(),
             request_ms.size());
  std::vector<double> load(devices.size(), 0);
  auto slot = [&](int dev) {
    const auto it = std::find(devices.begin(), devices.end(), dev);
    HIOS_CHECK(it != devices.end(), "internal error: a first replica on device %d, which is not served", dev);
    return size_t(it - devices.begin());
  };
  std::vector<std::vector<int>> out(request_ms.size());
  std::vector<std::pair<double, size_t>> extra;  // (share, model) of every replica after the first
  for (size_t m = 0; m < request_ms.size(); ++m) {
    HIOS_CHECK(counts[m] >= 1, "internal error: %d replicas of model %zu", counts[m], m);
    const double share = request_ms[m] / counts[m];
    load[slot(first_device[m])] += share;
    out[m].push_back(first_device[m]);
    for (int k = 1; k < counts[m]; ++k) extra.emplace_back(share, m);
  }
  std::stable_sort(extra.begin(), extra.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [share, m] : extra) {
    const size_t best = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    load[best] += share;
    out[m].push_back(devices[best]);
  }
  return out;
}

std::vector<std::pair<std::string, int>> parse_name_values(const std::string& s, const char* option, const char* value_name,
                                                           const char* value_is, int lo, int hi) {
  std::vector<std::pair<std::string, int>> out;
  size_t from = 0;
  for (;;) {
    const size_t comma = s.find(',', from);
    const std::string item = s.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    HIOS_CHECK(!item.empty(), "%s: empty item in '%s'", option, s.c_str());
    const size_t eq = item.rfind('=');
    HIOS_CHECK(eq != std::string::npos && eq > 0, "%s: expected model=%s, got '%s'", option, value_name, item.c_str());
    const std::string value = item.substr(eq + 1);
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    HIOS_CHECK(!value.empty() && end && *end == '\0' && v >= lo && v <= hi, "%s: '%s' is not %s from %d to %d (in '%s')",
               option, value.c_str(), value_is, lo, hi, item.c_str());
    out.emplace_back(item.substr(0, eq), int(v));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

std::vector<std::pair<std::string, int>> parse_replicas(const std::string& s) {
  return parse_name_values(s, "--replicas", "count", "a replica count", 1, kMaxReplicas);
}

std::vector<int> replica_counts(const std::vector<std::string>& models,
                                const std::vector<std::pair<std::string, int>>& replicas) {
  std::vector<int> out(models.size(), 0);
  for (const auto& [name, k] : replicas) {
    auto it = std::find(models.begin(), models.end(), name);
    HIOS_CHECK(it != models.end(), "--replicas: model '%s' is not served", name.c_str());
    const size_t m = size_t(it - models.begin());
    HIOS_CHECK(out[m] == 0, "--replicas: model '%s' is given twice", name.c_str());
    HIOS_CHECK(k >= 1 && k <= kMaxReplicas, "--replicas: %d replicas of '%s' is outside 1 to %d", k, name.c_str(),
               kMaxReplicas);
    out[m] = k;
  }
  for (int& k : out) k = std::max(k, 1);
  return out;
}

void check_devices(const std::vector<int>& devices, int visible) {
  for (size_t i = 0; i < devices.size(); ++i) {
    const int d = devices[i];
    HIOS_CHECK(d >= 0 && d < 1024, "--devices: device %d is outside 0 to 1023", d);
    HIOS_CHECK(std::find(devices.begin(), devices.begin() + ptrdiff_t(i), d) == devices.begin() + ptrdiff_t(i),
               "--devices: device %d is listed twice", d);
    HIOS_CHECK(visible < 0 || d < visible, "--devices: device %d was asked for, but this process sees %d device(s)", d,
               visible);
  }
}

std::vector<std::vector<int>> explicit_placement(const std::vector<std::string>& models,
                                                 const std::vector<int>& devices,
                                                 const std::vector<std::pair<std::string, int>>& placement,
                                                 const std::vector<int>& replicas) {
  HIOS_CHECK(!devices.empty(), "--placement needs --devices (the devices it places models on)");
  HIOS_CHECK(replicas.empty() || replicas.size() == models.size(), "internal error: %zu replica counts for %zu models",
             replicas.size(), models.size());
  auto count = [&](size_t m) { return replicas.empty() ? 1 : replicas[m]; };
  std::vector<std::vector<int>> out(models.size());
  for (const auto& [name, dev] : placement) {
    auto it = std::find(models.begin(), models.end(), name);
    HIOS_CHECK(it != models.end(), "--placement: model '%s' is not served", name.c_str());
    const size_t m = size_t(it - models.begin());
    if (count(m) == 1) {
      HIOS_CHECK(out[m].empty(), "--placement: model '%s' is placed twice", name.c_str());
    } else {
      HIOS_CHECK(int(out[m].size()) < count(m),
                 "--placement: model '%s' is placed more than %d times, once per replica", name.c_str(), count(m));
    }
    HIOS_CHECK(std::count(devices.begin(), devices.end(), dev) == 1, "--placement: device %d of '%s' is not in --devices",
               dev, name.c_str());
    out[m].push_back(dev);
  }
  for (size_t m = 0; m < models.size(); ++m) {
    HIOS_CHECK(!out[m].empty(), "--placement: model '%s' is not placed (every served model must be)",
               models[m].c_str());
    HIOS_CHECK(int(out[m].size()) == count(m),
               "--placement: model '%s' is placed %zu time(s) but has %d replicas (--replicas): "
               "name it once per replica",
               models[m].c_str(), out[m].size(), count(m));
  }
  return out;
}

}  // namespace hios::exec
