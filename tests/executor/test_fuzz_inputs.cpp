// A mutation fuzzer over the readers of the binary and line files users hand to hios run and
// hios serve: .npy inputs (every dtype the reader takes, several ranks), safetensors weights
// and serve arrival traces. Each case mutates a valid file's bytes (a byte changed or set to an
// extreme, a span deleted or duplicated, a truncation, a run of one byte inserted, a number in
// the text header replaced by an extreme one) and reads it. A reader may accept the result or
// throw hios::Error with a message; anything else (another exception type, a crash, a sanitizer
// report in the sanitizer build) fails.
//
// HIOS_FUZZ_CASES sets the number of cases per reader (default 3000, as CI runs it), HIOS_FUZZ_SEED
// the generator's seed; docs/testing.md records the longer runs.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "executor/safetensors.hpp"
#include "graph/error.hpp"
#include "graph/npy.hpp"
#include "serve/serve.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

using Rng = test::SplitMix;

int fuzz_cases() {
  const char* env = std::getenv("HIOS_FUZZ_CASES");
  const long n = env ? std::strtol(env, nullptr, 10) : 3000;
  return n > 0 && n < 100000000 ? int(n) : 3000;
}

uint64_t fuzz_seed() {
  const char* env = std::getenv("HIOS_FUZZ_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 1;
}

const char* kNumbers[] = {"0", "-1", "4294967299", "9223372036854775807", "18446744073709551615",
                          "-9223372036854775808", "99999999999999999999", "1e400", "2.5", ""};

// One mutation of `bytes`.
std::string mutate_bytes(const std::string& bytes, Rng& r) {
  std::string t = bytes;
  const size_t n = t.size();
  switch (r.below(8)) {
    case 0:  // a byte changed
      if (n) t[r.below(n)] = char(r.below(256));
      break;
    case 1: {  // a byte set to an extreme
      const char ext[] = {'\0', '\x7f', '\x80', '\xff', '(', ')', ',', '\n'};
      if (n) t[r.below(n)] = ext[r.below(sizeof ext)];
      break;
    }
    case 2:  // truncated
      t.resize(r.below(n + 1));
      break;
    case 3: {  // a span deleted
      const size_t a = r.below(n + 1), len = r.below(std::min<size_t>(64, n - a) + 1);
      t.erase(a, len);
      break;
    }
    case 4: {  // a span duplicated
      const size_t a = r.below(n + 1), len = r.below(std::min<size_t>(64, n - a) + 1);
      t.insert(a, t.substr(a, len));
      break;
    }
    case 5:  // a run of one byte inserted
      t.insert(r.below(n + 1), std::string(1 + r.below(5000), char(r.below(256))));
      break;
    default: {  // a digit run of the text part replaced by an extreme number
      std::vector<size_t> starts;
      for (size_t i = 0; i < std::min<size_t>(n, 4096); ++i) {
        if (std::isdigit(static_cast<unsigned char>(t[i])) && (i == 0 || !std::isdigit(static_cast<unsigned char>(t[i - 1])))) {
          starts.push_back(i);
        }
      }
      if (starts.empty()) break;
      const size_t a = starts[r.below(starts.size())];
      size_t b = a;
      while (b < t.size() && std::isdigit(static_cast<unsigned char>(t[b]))) ++b;
      t.replace(a, b - a, kNumbers[r.below(sizeof kNumbers / sizeof *kNumbers)]);
      break;
    }
  }
  return t;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Reads every mutation of each of `seeds`; counts what was accepted and what was refused.
void fuzz_reader(const std::string& what, const std::vector<std::string>& seeds, uint64_t seed,
                 const std::function<void(const std::string&, int)>& read) {
  for (size_t s = 0; s < seeds.size(); ++s) read(seeds[s], -1 - int(s));  // the valid files read
  Rng r{seed};
  int accepted = 0, refused = 0;
  const int n = fuzz_cases();
  for (int i = 0; i < n; ++i) {
    const std::string t = mutate_bytes(seeds[r.below(seeds.size())], r);
    try {
      read(t, i);
      ++accepted;
    } catch (const Error& e) {
      ++refused;
      REQUIRE(std::string(e.what()).size() > 0);
    } catch (const std::exception& e) {
      FAIL(what << " case " << i << " (seed " << seed << "): " << typeid(e).name() << ": " << e.what());
    }
  }
  INFO(what << ": " << accepted << " accepted, " << refused << " refused");
  std::printf("fuzz %s: %d cases, %d accepted, %d refused\n", what.c_str(), n, accepted, refused);
  CHECK(accepted + refused == n);
  CHECK(refused > n / 4);  // the mutations do reach the checks
}

}  // namespace

TEST_CASE("fuzz: the .npy reader refuses mutated files of every dtype with hios::Error only", "[fuzz]") {
  std::vector<std::string> seeds;
  seeds.push_back(npy_bytes({1, 3, 4, 5}, std::vector<float>(60, 0.5f)));
  seeds.push_back(npy_bytes({7}, std::vector<float>(7, -2.0f)));
  seeds.push_back(npy_bytes({}, std::vector<float>(1, 3.0f)));
  for (DType t : {DType::I64, DType::I32, DType::Bool, DType::U8, DType::F16}) {
    seeds.push_back(npy_bytes({2, 3}, t, std::vector<uint8_t>(size_t(6 * dtype_size(t)), 1)));
  }
  fuzz_reader("npy", seeds, fuzz_seed(), [](const std::string& bytes, int) {
    const NpyArray a = parse_npy(bytes, "fuzz.npy");
    int64_t n = 1;
    for (int64_t d : a.shape) n *= d;
    REQUIRE(n == a.numel());  // what it accepts is self-consistent
  });
}

TEST_CASE("fuzz: the safetensors reader refuses mutated files with hios::Error only", "[fuzz]") {
  std::map<std::string, exec::TensorEntry> tensors;
  tensors["c1.weight"] = exec::TensorEntry{{4, 3, 3, 3}, std::vector<float>(108, 0.25f)};
  tensors["c1.bias"] = exec::TensorEntry{{4}, std::vector<float>(4, 1.0f)};
  tensors["fc.weight"] = exec::TensorEntry{{2, 4}, std::vector<float>(8, -1.0f)};
  const std::string good = exec::safetensors_bytes(tensors);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("hios-fuzz-st-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // The reader keeps what it loaded per path: every case gets a path of its own.
  fuzz_reader("safetensors", {good}, fuzz_seed() + 1, [&](const std::string& bytes, int i) {
    const std::string path = (dir / ("w" + std::to_string(i + 10) + ".safetensors")).string();
    write_bytes(path, bytes);
    auto loaded = exec::load_safetensors(path);
    std::filesystem::remove(path);
    for (const auto& [name, e] : *loaded) {
      int64_t n = 1;
      for (int64_t d : e.shape) n *= d;
      REQUIRE(size_t(n) == e.values.size());
    }
  });
  std::filesystem::remove_all(dir);
}

TEST_CASE("fuzz: the serve trace reader refuses mutated files with hios::Error only", "[fuzz]") {
  const std::string good = "# time_s,model\n0.001,demo\n0.0015,other\n0.25,demo\n1.5,other\n";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("hios-fuzz-trace-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  fuzz_reader("serve trace", {good}, fuzz_seed() + 2, [&](const std::string& bytes, int i) {
    const std::string path = (dir / ("t" + std::to_string(i + 10) + ".txt")).string();
    write_bytes(path, bytes);
    exec::ArrivalSpec spec;
    spec.kind = "file";
    spec.file = path;
    const std::vector<exec::Request> trace = exec::make_trace(spec, {"demo", "other"});
    std::filesystem::remove(path);
    for (size_t k = 1; k < trace.size(); ++k) REQUIRE(trace[k - 1].arrival_s <= trace[k].arrival_s);
  });
  std::filesystem::remove_all(dir);
}
