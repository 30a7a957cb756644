// A mutation fuzzer over the loaders that take files from users: graphs, schedules (split ones
// too), profile databases and device presets. Each case mutates a valid document's text (a byte
// changed, a digit run replaced by an extreme number, a span deleted or duplicated, a
// truncation, a value nested thousands deep, an escaped control character or a long string
// where a name was, one name of the document put where another was (a reference redirected:
// cycles through the whole graph, unknown or self references), a path-like name, a number in
// another shape: fractional, signed zero, out of int range) and loads it. A
// loader may accept the result or throw hios::Error with a message; anything else (another
// exception type, a crash, a sanitizer report in the sanitizer build) fails.
//
// HIOS_FUZZ_CASES sets the number of cases per loader (CI: the default, 3000; docs/benchmarks
// records a longer run). The generator is a fixed-seed splitmix64, so a failure reproduces.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/json_reader.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"
#include "scheduler/spatial.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

using Rng = test::SplitMix;

const char* kExtremes[] = {"0", "-1", "4294967299", "9223372036854775807", "18446744073709551615", "-9223372036854775808",
                           "1e400", "-1e400", "1e-400", "2.5", "null", "\"x\"", "[]", "{}", "true", "4611686018427387904",
                           "1.5", "-0", "1.0", "1e20", "2147483648", "-2147483649", "0.0001", "-0.5"};
// Names a user could write that look like paths, or like names hios makes (a split part, a halo cut).
const char* kPathNames[] = {"../../victim", "/dev/stdout", "a/b", "x\\y", "", ".", "..", "~", "n@0", "n@1/mid",
                            "n@0>1:0-2", "n:0-3", " ", "-o"};

// The [begin, end) of every string's content in a JSON text (quotes excluded), escapes skipped.
std::vector<std::pair<size_t, size_t>> string_spans(const std::string& t) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '"') continue;
    const size_t b = i + 1;
    size_t e = b;
    while (e < t.size() && t[e] != '"') e += t[e] == '\\' ? 2 : 1;
    if (e >= t.size()) break;
    out.emplace_back(b, e);
    i = e;
  }
  return out;
}

std::string mutate(const std::string& text, Rng& r) {
  std::string t = text;
  const int edits = 1 + int(r.below(3));
  for (int e = 0; e < edits && !t.empty(); ++e) {
    const size_t at = r.below(t.size());
    switch (r.below(12)) {
      case 0: t[at] = char(r.below(256)); break;  // any byte
      case 1: {  // a run of digits becomes an extreme value
        size_t b = at;
        while (b < t.size() && !(t[b] >= '0' && t[b] <= '9')) ++b;
        size_t end = b;
        while (end < t.size() && ((t[end] >= '0' && t[end] <= '9') || t[end] == '.' || t[end] == 'e')) ++end;
        if (b < t.size()) t.replace(b, end - b, kExtremes[r.below(sizeof kExtremes / sizeof *kExtremes)]);
        break;
      }
      case 2: t.erase(at, r.below(40)); break;                         // a span deleted
      case 3: t.insert(at, t.substr(at, r.below(80))); break;          // a span duplicated
      case 4: t.resize(at); break;                                     // truncated
      case 5: {  // a value nested deeper than any reader should recurse
        const size_t depth = 200 + r.below(20000);
        t.insert(at, std::string(depth, '[') + std::string(depth, ']'));
        break;
      }
      case 6: {  // an escaped control character (NUL, ESC, newline) inside the next string
        static const char* kEscapes[] = {"\\u0000", "\\u001b", "\\n", "\\u007f", "\\ud800"};
        const size_t q = t.find('"', at);
        if (q != std::string::npos) t.insert(q + 1, kEscapes[r.below(5)]);
        break;
      }
      case 7: {  // the next string replaced by a long one
        const size_t q = t.find('"', at);
        const size_t e = q == std::string::npos ? q : t.find('"', q + 1);
        if (e != std::string::npos) t.replace(q + 1, e - q - 1, std::string(1 + r.below(100000), 'a'));
        break;
      }
      case 8: {  // one string of the document put where another was: a reference redirected
        const auto spans = string_spans(t);
        if (spans.size() < 2) break;
        const auto& from = spans[r.below(spans.size())];
        const auto& to = spans[r.below(spans.size())];
        const std::string name = t.substr(from.first, from.second - from.first);
        t.replace(to.first, to.second - to.first, name);
        break;
      }
      case 9: {  // a string replaced by a path-like or generated-looking name
        const auto spans = string_spans(t);
        if (spans.empty()) break;
        const auto& to = spans[r.below(spans.size())];
        t.replace(to.first, to.second - to.first, kPathNames[r.below(sizeof kPathNames / sizeof *kPathNames)]);
        break;
      }
      default: t.insert(at, kExtremes[r.below(sizeof kExtremes / sizeof *kExtremes)]); break;
    }
  }
  return t;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int cases() {
  const char* env = std::getenv("HIOS_FUZZ_CASES");
  const long n = env ? std::strtol(env, nullptr, 10) : 3000;
  return n > 0 && n < 100000000 ? int(n) : 3000;
}

// Loads every mutation; counts what was accepted and what was refused with an hios::Error.
template <class Load>
void fuzz(const std::string& what, const std::string& text, uint64_t seed, Load load) {
  load(parse_json_text(text, what));  // the unmutated document loads: the cases start from valid input
  Rng r{seed};
  int accepted = 0, refused = 0;
  const int n = cases();
  for (int i = 0; i < n; ++i) {
    const std::string t = mutate(text, r);
    try {
      load(parse_json_text(t, "fuzz"));
      ++accepted;
    } catch (const Error& e) {
      ++refused;
      REQUIRE(std::string(e.what()).size() > 0);
    } catch (const std::exception& e) {
      FAIL(what << " case " << i << ": " << typeid(e).name() << ": " << e.what() << "\n" << t.substr(0, 400));
    }
  }
  INFO(what << ": " << accepted << " accepted, " << refused << " refused");
  CHECK(accepted + refused == n);
  CHECK(refused > n / 2);  // the mutations do reach the checks
}

}  // namespace

TEST_CASE("fuzz: the graph, schedule and profile loaders refuse mutated files with hios::Error only") {
  const Graph g = build_model("demo", ModelParams{1, 15, 15});
  const std::string graph_text = graph_to_text(g);
  auto cost = make_analytic_cost_model(find_device_preset("h200"));
  SchedulerOptions so;
  so.num_gpus = 2;
  so.single_gpu_fallback = false;
  Schedule s = run_algorithm("hios-lp", g, *cost, so);
  s.meta.search_seconds = 0;  // a clock reading: the text, and so every case, must not depend on it
  const std::string schedule_text = schedule_to_json(g, s).dump(1);
  ProfileDb db;
  db.device = "h200";
  std::set<std::string> signatures;
  for (int v = 1; v < g.size(); ++v) {
    if (signatures.insert(node_signature(g, v)).second) {
      db.entries.push_back(ProfileEntry{node_signature(g, v), 0.01 * v, 3, 0.001, g.nodes[v].name});
    }
  }
  db.links.push_back(ProfileLink{0, 1, 20, 300});
  db.stages.push_back(ProfileStage{stage_key(g, s.blocks[0][0][0]), 0.05, 3});
  db.identity = json{{"device", "NVIDIA H200"}, {"graph_digest", graph_digest(g)}};
  db.concurrency = json{{"alpha", 0.3}, {"stage_overhead_us", 2.0}};
  db.pass_overhead_ms = 0.01;
  db.choices = json{{"x1x3x15x15 w16x3x3x3 impl auto", json{{"impl", "legacy"}, {"algo", 1}, {"math", 0}}}};
  db.searched = json{{"gpus", 2}, {"streams", 4}, {"candidates", json::array()}};
  const std::string profile_text = profile_db_to_text(db);

  fuzz("graph", graph_text, 1, [](const json& j) {
    Graph x = graph_from_json(j);
    (void)x;
  });
  fuzz("schedule", schedule_text, 2, [&](const json& j) {
    Schedule x = schedule_from_json(g, j);
    (void)check_schedule(g, x);
  });
  // A row split: its schedule (meta.spatial splits the graph on load) and its split graph
  // (bands on conv and pool, the rows op, params_from).
  SpatialSchedule split = schedule_spatial("hios-lp", g, *cost, so, SpatialOptions{"2", "halo"});
  REQUIRE(!split.plan.empty());
  split.schedule.meta.search_seconds = 0;
  const std::string split_text = schedule_to_json(split.graph, split.schedule).dump(1);
  fuzz("split schedule", split_text, 4, [&](const json& j) {
    Graph copy = g;
    Schedule x = schedule_from_json_split(copy, j);
    (void)check_schedule(copy, x);
  });
  fuzz("split graph", graph_to_text(split.graph), 5, [](const json& j) {
    Graph x = graph_from_json(j);
    (void)x;
  });
  fuzz("device presets", file_text(std::string(HIOS_SOURCE_DIR) + "/schedules/devices.json"), 6, [](const json& j) {
    std::vector<DevicePreset> x = device_presets_from_json(j, "fuzz");
    (void)x;
  });
  fuzz("profile", profile_text, 3, [&](const json& j) {
    ProfileDb x = profile_db_from_json(j);
    auto c = make_profile_cost_model(x, "fuzz", find_device_preset("h200"));
    (void)c;
  });
}
