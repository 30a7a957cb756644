#include "executor/shape_set.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"

namespace hios::exec {

std::string ShapeKey::str() const {
  return strprintf("%lldx%lldx%lld", (long long)batch, (long long)height, (long long)width);
}

bool ShapeKey::operator<(const ShapeKey& o) const {
  return std::tie(batch, height, width) < std::tie(o.batch, o.height, o.width);
}

namespace {

int64_t parse_int(const std::string& item, const char* what, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(item.c_str(), &end, 10);
  HIOS_CHECK(!item.empty() && end && *end == '\0' && errno == 0 && v >= lo && v <= hi,
             "%s: '%s' is not a whole number from %lld to %lld", what, item.c_str(), (long long)lo, (long long)hi);
  return v;
}

std::vector<std::string> split_list(const std::string& s, const char* what) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  HIOS_CHECK(!out.empty() && (s.empty() || s.back() != ','), "%s: '%s' is not a comma-separated list", what,
             s.c_str());
  return out;
}

}  // namespace

std::vector<ShapeKey> parse_shape_list(const std::string& sizes, const std::string& batches) {
  std::vector<std::pair<int64_t, int64_t>> hw;
  for (const std::string& item : split_list(sizes, "--shapes")) {
    const size_t x = item.find('x');
    if (x == std::string::npos) {
      const int64_t s = parse_int(item, "--shapes", 1, 65536);
      hw.emplace_back(s, s);
    } else {
      hw.emplace_back(parse_int(item.substr(0, x), "--shapes (height)", 1, 65536),
                      parse_int(item.substr(x + 1), "--shapes (width)", 1, 65536));
    }
  }
  std::vector<int64_t> ns;
  for (const std::string& item : split_list(batches, "--batches")) ns.push_back(parse_int(item, "--batches", 1, 4096));
  std::vector<ShapeKey> keys;
  for (const auto& [h, w] : hw) {
    for (int64_t n : ns) {
      const ShapeKey k{n, h, w};
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  return keys;
}

ShapeSet::ShapeSet(GraphMaker make_graph, ScheduleMaker make_schedule, const ShapeSetOptions& opt, Comm& self)
    : make_graph_(std::move(make_graph)), make_schedule_(std::move(make_schedule)), opt_(opt), self_(self) {
  HIOS_CHECK(self.size() == 1, "a shape set runs on one process and one device; this job has %d ranks", self.size());
  HIOS_CHECK(opt.cuda_graph == "on" || opt.cuda_graph == "off" || opt.cuda_graph == "auto",
             "--cuda-graph must be on, off or auto, not '%s'", opt.cuda_graph.c_str());
}

ShapeSet::~ShapeSet() = default;

std::vector<ShapeKey> ShapeSet::shapes() const {
  std::vector<ShapeKey> out;
  for (const auto& [k, b] : buckets_) out.push_back(k);
  return out;
}

const Graph& ShapeSet::graph(const ShapeKey& key) const {
  auto it = buckets_.find(key);
  HIOS_CHECK(it != buckets_.end(), "shape %s is not in the set", key.str().c_str());
  return *it->second.g;
}

const Schedule& ShapeSet::schedule(const ShapeKey& key) const {
  auto it = buckets_.find(key);
  HIOS_CHECK(it != buckets_.end(), "shape %s is not in the set", key.str().c_str());
  return it->second.schedule;
}

int64_t ShapeSet::arena_bytes(const ShapeKey& key) const {
  auto it = buckets_.find(key);
  HIOS_CHECK(it != buckets_.end(), "shape %s is not in the set", key.str().c_str());
  // Planned in float32 bytes; the backend stores element_bytes() per element (RankSession::load).
  return it->second.program.arena_bytes / 4 * int64_t(session_->backend().element_bytes());
}

void ShapeSet::prepare(const std::vector<ShapeKey>& keys) {
  std::vector<ShapeKey> fresh;
  for (const ShapeKey& k : keys) {
    if (!prepared(k) && std::find(fresh.begin(), fresh.end(), k) == fresh.end()) fresh.push_back(k);
  }
  if (fresh.empty()) return;
  // Graphs, schedules and programs first: the arena every program uses is the largest of them.
  for (const ShapeKey& k : fresh) {
    Bucket b;
    b.g = std::make_unique<Graph>(make_graph_(k));
    HIOS_CHECK(b.g->batch == k.batch && b.g->height == k.height && b.g->width == k.width,
               "internal error: shape %s was asked for but the graph is %lldx%lldx%lld", k.str().c_str(),
               (long long)b.g->batch, (long long)b.g->height, (long long)b.g->width);
    if (!buckets_.empty()) {
      const std::string problem = shape_variant_problem(*buckets_.begin()->second.g, *b.g);
      HIOS_CHECK(problem.empty(), "shape %s: %s", k.str().c_str(), problem.c_str());
    }
    b.schedule = make_schedule_(*b.g);
    HIOS_CHECK(b.schedule.meta.num_gpus == 1, "shape %s: a shape set runs one-GPU schedules, this one uses %d",
               k.str().c_str(), b.schedule.meta.num_gpus);
    b.program = lower(*b.g, b.schedule, 0);
    plan_and_check_shared_buffers(*b.g, b.program);
    b.slot = next_slot_++;
    buckets_.emplace(k, std::move(b));
  }
  if (!session_) {
    session_ = std::make_unique<RankSession>(*buckets_.at(fresh.front()).g, opt_.session, self_);
    const bool can = session_->backend().can_capture() && session_->backend().can_keep();
    HIOS_CHECK(opt_.cuda_graph != "on" || can, "--cuda-graph on: the %s backend cannot keep a captured pass per shape",
               session_->backend().name().c_str());
    capture_ = opt_.cuda_graph == "on" || (opt_.cuda_graph == "auto" && can);
  }
  Backend& be = session_->backend();
  int64_t most = 0;
  for (const auto& [k, b] : buckets_) most = std::max(most, arena_bytes(k));
  be.reserve_arena(size_t(std::max<int64_t>(most, 1)));
  // Largest first: its plans grow the scratch arenas and workspaces to what the smaller ones
  // mostly fit in, so fewer captures are made twice.
  std::sort(fresh.begin(), fresh.end(), [&](const ShapeKey& a, const ShapeKey& b) {
    return std::make_pair(arena_bytes(a), a.pixels()) > std::make_pair(arena_bytes(b), b.pixels());
  });
  for (const ShapeKey& k : fresh) {
    Bucket& b = buckets_.at(k);
    if (capture_) {
      capture(k, b);
    } else {
      session_->load_shape(*b.g, b.program);  // plans it: algorithm choices and weights now, not on first use
      have_current_ = true;
      current_ = k;
    }
  }
  // Any pass captured before a buffer moved reads the old place: capture it again. Nothing grows
  // the second time (the buffers are at the largest need), so one round settles it.
  if (capture_) {
    for (auto& [k, b] : buckets_) {
      if (b.captured && !be.kept_current(b.slot)) {
        capture(k, b);
        ++recaptures_;
      }
    }
    for (auto& [k, b] : buckets_) {
      HIOS_CHECK(!b.captured || be.kept_current(b.slot),
                 "internal error: shape %s's captured pass still reads moved buffers after a recapture",
                 k.str().c_str());
    }
  }
}

void ShapeSet::capture(const ShapeKey& k, Bucket& b) {
  session_->load_shape(*b.g, b.program);
  session_->capture();  // an eager pass first: libraries allocate on first use, outside the graph
  session_->backend().keep(b.slot);
  b.captured = true;
  ++captures_;
  have_current_ = true;
  current_ = k;
}

ShapeSet::Bucket& ShapeSet::bucket(const ShapeKey& key) {
  if (!prepared(key)) {
    if (opt_.prepare_on_demand) {
      prepare({key});
    } else {
      std::string known;
      for (const auto& [k, b] : buckets_) known += (known.empty() ? "" : ", ") + k.str();
      throw_error("shape %s (batch x height x width) was not prepared (prepared: %s); add it to --shapes/--batches "
                  "or allow --prepare-on-demand",
                  key.str().c_str(), known.empty() ? "none" : known.c_str());
    }
  }
  return buckets_.at(key);
}

void ShapeSet::make_current(const ShapeKey& key) {
  Bucket& b = bucket(key);
  Backend& be = session_->backend();
  if (capture_) {
    if (!be.kept_current(b.slot)) {  // a later prepare on demand moved a buffer it reads
      capture(key, b);
      ++recaptures_;
    }
    be.switch_to(b.slot);
  } else if (!have_current_ || !(current_ == key)) {
    session_->load_shape(*b.g, b.program);
    ++switches_;
  }
  have_current_ = true;
  current_ = key;
}

TensorView ShapeSet::input(const ShapeKey& key) {
  make_current(key);
  return session_->backend().tensor(buckets_.at(key).g->input());
}

TensorView ShapeSet::output(const ShapeKey& key) {
  make_current(key);
  return session_->backend().tensor(buckets_.at(key).g->output());
}

void ShapeSet::set_input(const ShapeKey& key, const std::vector<float>& nchw) {
  make_current(key);
  session_->backend().set_input(nchw);
}

void ShapeSet::run(const ShapeKey& key) {
  make_current(key);
  if (capture_) {
    Backend& be = session_->backend();
    be.replay();
    be.synchronize();
  } else {
    session_->pass();
  }
}

std::vector<float> ShapeSet::read_output(const ShapeKey& key) {
  make_current(key);
  return session_->backend().read_tensor(buckets_.at(key).g->output());
}

std::vector<double> ShapeSet::timed_runs(const ShapeKey& key, int count) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> ms;
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    run(key);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

PassContents ShapeSet::pass_contents(const ShapeKey& key) {
  if (!capture_) return {};
  const TensorView in = input(key);
  return session_->backend().kept_contents(buckets_.at(key).slot, in.data, in.bytes);
}

size_t ShapeSet::memory_in_use() const { return session_ ? session_->backend().memory_in_use() : 0; }

size_t ShapeSet::kept_arena_bytes() const { return session_ ? session_->backend().reserved_arena() : 0; }

}  // namespace hios::exec
