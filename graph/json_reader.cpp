#include "graph/json_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "graph/error.hpp"

namespace hios {

const char* json_type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

JsonObject::JsonObject(const json& j, std::string path) : j_(j), path_(std::move(path)) {
  HIOS_CHECK(j.is_object(), "%s: expected an object, got %s", path_.c_str(), json_type_name(j));
}

const json& JsonObject::at(const std::string& key) {
  used_.insert(key);
  auto it = j_.find(key);
  HIOS_CHECK(it != j_.end(), "%s: missing", child_path(key).c_str());
  return *it;
}

int64_t JsonObject::get_int(const std::string& key) { return json_int(at(key), child_path(key)); }
double JsonObject::get_number(const std::string& key) { return json_number(at(key), child_path(key)); }
bool JsonObject::get_bool(const std::string& key) {
  const json& v = at(key);
  HIOS_CHECK(v.is_boolean(), "%s: expected a boolean, got %s", child_path(key).c_str(), json_type_name(v));
  return v.get<bool>();
}
std::string JsonObject::get_string(const std::string& key) { return json_string(at(key), child_path(key)); }
const json& JsonObject::get_array(const std::string& key) { return json_array(at(key), child_path(key)); }
const json& JsonObject::get_object(const std::string& key) {
  const json& v = at(key);
  HIOS_CHECK(v.is_object(), "%s: expected an object, got %s", child_path(key).c_str(), json_type_name(v));
  return v;
}

int64_t JsonObject::get_int(const std::string& key, int64_t def) { return has(key) ? get_int(key) : def; }
double JsonObject::get_number(const std::string& key, double def) { return has(key) ? get_number(key) : def; }
bool JsonObject::get_bool(const std::string& key, bool def) { return has(key) ? get_bool(key) : def; }
std::string JsonObject::get_string(const std::string& key, const std::string& def) {
  return has(key) ? get_string(key) : def;
}

std::array<int, 2> JsonObject::get_pair(const std::string& key, std::array<int, 2> def) {
  if (!has(key)) return def;
  const json& v = at(key);
  std::string p = child_path(key);
  // Range-checked into int: a kernel of 4294967299 must not wrap to 3.
  if (v.is_number_integer()) {
    int a = static_cast<int>(json_int_in(v, p, INT32_MIN, INT32_MAX));
    return {a, a};
  }
  HIOS_CHECK(v.is_array() && v.size() == 2, "%s: expected [int, int], got %s", p.c_str(), json_type_name(v));
  return {static_cast<int>(json_int_in(v[0], p + "[0]", INT32_MIN, INT32_MAX)),
          static_cast<int>(json_int_in(v[1], p + "[1]", INT32_MIN, INT32_MAX))};
}

void JsonObject::expect_header(const char* format, int version) {
  std::string f = get_string("format");
  HIOS_CHECK(f == format, "%s: expected \"%s\", got \"%s\"", child_path("format").c_str(), format, f.c_str());
  int64_t v = get_int("version");
  HIOS_CHECK(v == version, "%s: unsupported version %lld (this build reads %d)", child_path("version").c_str(),
             (long long)v, version);
}

void JsonObject::finish() const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    HIOS_CHECK(used_.count(it.key()) != 0, "%s: unknown key", child_path(it.key()).c_str());
  }
}

int64_t json_int(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_number_integer(), "%s: expected an integer, got %s", path.c_str(), json_type_name(j));
  // An unsigned value past INT64_MAX would wrap negative in get<int64_t>().
  HIOS_CHECK(!j.is_number_unsigned() || j.get<uint64_t>() <= uint64_t(INT64_MAX), "%s: %llu is out of range",
             path.c_str(), (unsigned long long)j.get<uint64_t>());
  return j.get<int64_t>();
}

int64_t json_int_in(const json& j, const std::string& path, int64_t lo, int64_t hi) {
  const int64_t v = json_int(j, path);
  HIOS_CHECK(v >= lo && v <= hi, "%s: %lld is out of range (%lld to %lld)", path.c_str(), (long long)v, (long long)lo,
             (long long)hi);
  return v;
}

int64_t JsonObject::get_int_in(const std::string& key, int64_t lo, int64_t hi) {
  return json_int_in(at(key), child_path(key), lo, hi);
}

double json_number(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_number(), "%s: expected a number, got %s", path.c_str(), json_type_name(j));
  const double v = j.get<double>();
  HIOS_CHECK(std::isfinite(v), "%s: %g is not a finite number", path.c_str(), v);
  return v;
}

std::string json_string(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_string(), "%s: expected a string, got %s", path.c_str(), json_type_name(j));
  return j.get<std::string>();
}

const json& json_array(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_array(), "%s: expected an array, got %s", path.c_str(), json_type_name(j));
  return j;
}

namespace {

// A first pass over the text that builds nothing: it bounds the nesting (copying, comparing or
// printing a json value recurses once per level, and a file nested a million deep would
// overflow the stack there) and finds the first duplicate key (nlohmann keeps the last one
// silently, and a hand-edited file with two "kernel" keys would run with whichever came
// second). nlohmann's parser with a callback does both, but after every object it scans the
// enclosing container for discarded values: quadratic in an array of objects (a 100,000-node
// graph took 2 s to parse that way).
class JsonChecker final : public nlohmann::json_sax<json> {
 public:
  explicit JsonChecker(const std::string& source_name) : source_name_(source_name) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    enter();
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second && duplicate_.empty()) duplicate_ = k;
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    enter();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    if (const auto* pe = dynamic_cast<const json::parse_error*>(&ex)) {
      throw Error(strprintf("%s: malformed JSON at byte %zu", source_name_.c_str(), pe->byte));
    }
    // e.g. 1e400: "number overflow parsing '1e400'"
    const std::string what = ex.what();
    const size_t at = what.find("number overflow");
    throw Error(strprintf("%s: %s", source_name_.c_str(),
                          at == std::string::npos ? "a number is out of range" : what.substr(at).c_str()));
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  void enter() {
    if (depth_ >= kMaxJsonDepth) {
      throw Error(strprintf("%s: JSON nested deeper than %d levels", source_name_.c_str(), kMaxJsonDepth));
    }
    ++depth_;
  }
  const std::string& source_name_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;
  std::string duplicate_;
};

}  // namespace

json parse_json_text(const std::string& text, const std::string& source_name) {
  JsonChecker checker(source_name);
  json::sax_parse(text, &checker);
  HIOS_CHECK(checker.duplicate().empty(), "%s: duplicate key \"%s\" in an object", source_name.c_str(),
             checker.duplicate().c_str());
  // The text is well-formed and shallow: the plain parser builds it without a callback.
  return json::parse(text);
}

std::string read_input_file(const std::string& file, const char* kind) {
  struct stat st {};
  HIOS_CHECK(::stat(file.c_str(), &st) == 0, "%s: cannot open: %s", file.c_str(), std::strerror(errno));
  HIOS_CHECK(!S_ISDIR(st.st_mode), "%s: is a directory, not a %s", file.c_str(), kind);
  HIOS_CHECK(!S_ISREG(st.st_mode) || uint64_t(st.st_size) <= kMaxInputBytes,
             "%s: %lld bytes, more than the %llu-byte limit on an input file", file.c_str(), (long long)st.st_size,
             (unsigned long long)kMaxInputBytes);
  std::ifstream in(file, std::ios::binary);
  HIOS_CHECK(in.good(), "%s: cannot open: %s", file.c_str(), std::strerror(errno));
  // Read with a cap, so that /dev/zero or an endless pipe ends with an error, not out of memory.
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, size_t(in.gcount()));
    HIOS_CHECK(text.size() <= kMaxInputBytes, "%s: more than the %llu-byte limit on an input file", file.c_str(),
               (unsigned long long)kMaxInputBytes);
  }
  return text;
}

json read_json_file(const std::string& file) { return parse_json_text(read_input_file(file, "JSON file"), file); }

namespace {

// The temporary file being written, for the signal handler. Writes are serialised by a mutex,
// so there is at most one; the handler may only use async-signal-safe calls (unlink, raise).
char g_pending[PATH_MAX + 64];
std::atomic<bool> g_has_pending{false};
std::mutex g_write_mu;
struct sigaction g_old_int {}, g_old_term {};

extern "C" void remove_pending_and_reraise(int sig) {
  if (g_has_pending.load()) ::unlink(g_pending);
  ::sigaction(sig, sig == SIGINT ? &g_old_int : &g_old_term, nullptr);
  ::raise(sig);
}

void install_cleanup_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = remove_pending_and_reraise;
    sigemptyset(&sa.sa_mask);
    // A signal the parent set to be ignored (nohup, a shell's background job) stays ignored:
    // catching it would end a write the user meant to survive it.
    for (auto [sig, old] : {std::pair<int, struct sigaction*>{SIGINT, &g_old_int}, {SIGTERM, &g_old_term}}) {
      ::sigaction(sig, nullptr, old);
      if (old->sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);
    }
  });
}

void write_all(int fd, const std::string& text, const std::string& file) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    HIOS_CHECK(n > 0, "%s: write failed: %s", file.c_str(), std::strerror(errno));
    done += size_t(n);
  }
}

// Where `file` really points: a symlink's target (resolved even when it does not exist yet).
std::string follow_symlink(const std::string& file) {
  struct stat lst {};
  if (::lstat(file.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return file;
  if (char* real = ::realpath(file.c_str(), nullptr)) {
    std::string out = real;
    std::free(real);
    return out;
  }
  HIOS_CHECK(errno != ELOOP, "%s: is a symlink loop; refusing to replace any link in it", file.c_str());
  std::string link(PATH_MAX, '\0');
  const ssize_t n = ::readlink(file.c_str(), link.data(), link.size());
  HIOS_CHECK(n > 0, "%s: cannot read the symlink: %s", file.c_str(), std::strerror(errno));
  link.resize(size_t(n));
  if (link[0] == '/') return link;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? link : file.substr(0, slash + 1) + link;
}

}  // namespace

// The descriptor a name such as /dev/stdout or /dev/fd/3 stands for (-1: none). Writing there
// means writing into the open descriptor, appending where the shell opened it with >>: never
// replacing the file behind it.
static int named_descriptor(const std::string& file) {
  if (file == "/dev/stdout") return STDOUT_FILENO;
  if (file == "/dev/stderr") return STDERR_FILENO;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string pre = prefix;
    if (file.rfind(pre, 0) != 0 || file.size() == pre.size() || file.size() > pre.size() + 6) continue;
    if (file.find_first_not_of("0123456789", pre.size()) != std::string::npos) continue;
    return std::stoi(file.substr(pre.size()));
  }
  return -1;
}

namespace {

// The folder a path's file sits in ("." for a bare name).
std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Where a write to `file` lands: an open descriptor it names, or the file behind its symlinks
// and what is there now. A folder, a symlink loop and a read-only regular file are refused
// here, by the check before a run and by the write itself alike.
struct WriteTarget {
  int descriptor = -1;  // /dev/stdout, /dev/fd/N, ...: written into, never replaced
  std::string path;     // otherwise: the file behind the symlinks
  bool exists = false;
  struct stat st {};
};

WriteTarget resolve_write_target(const std::string& file) {
  WriteTarget t;
  t.descriptor = named_descriptor(file);
  if (t.descriptor >= 0) {
    HIOS_CHECK(::fcntl(t.descriptor, F_GETFD) != -1, "%s: descriptor %d is not open", file.c_str(), t.descriptor);
    return t;
  }
  t.path = follow_symlink(file);  // refuses a symlink loop
  t.exists = ::stat(t.path.c_str(), &t.st) == 0;
  if (!t.exists) {
    HIOS_CHECK(errno == ENOENT, "%s: cannot write: %s", file.c_str(), std::strerror(errno));
    return t;
  }
  HIOS_CHECK(!S_ISDIR(t.st.st_mode), "%s: is a directory", file.c_str());
  // Root may write anything; a file nobody may write was made read-only on purpose.
  HIOS_CHECK(!S_ISREG(t.st.st_mode) || (t.st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) != 0,
             "%s: is read-only (mode %04o); refusing to replace it", file.c_str(), unsigned(t.st.st_mode & 07777));
  return t;
}

}  // namespace

void check_writable(const std::string& file, bool makes_folders) {
  const WriteTarget t = resolve_write_target(file);
  if (t.descriptor >= 0) return;
  if (t.exists && !S_ISREG(t.st.st_mode)) {
    HIOS_CHECK(::access(t.path.c_str(), W_OK) == 0, "%s: cannot open for writing: %s", file.c_str(), std::strerror(errno));
    return;
  }
  // The temporary file is made in the target's folder, which must exist and take new files.
  struct stat dst {};
  std::string folder = folder_of(t.path);
  // A writer that makes the missing folders first needs the nearest existing one to take them.
  while (makes_folders && ::stat(folder.c_str(), &dst) != 0 && errno == ENOENT && folder != "." && folder != "/") {
    folder = folder_of(folder);
  }
  HIOS_CHECK(::stat(folder.c_str(), &dst) == 0, "%s: cannot write: folder %s: %s", file.c_str(), folder.c_str(),
             std::strerror(errno));
  HIOS_CHECK(S_ISDIR(dst.st_mode), "%s: cannot write: %s is not a folder", file.c_str(), folder.c_str());
  HIOS_CHECK(::access(folder.c_str(), W_OK | X_OK) == 0, "%s: cannot write: %s", file.c_str(), std::strerror(errno));
}

void write_file_atomic(const std::string& file, const std::string& text) {
  const WriteTarget t = resolve_write_target(file);
  if (t.descriptor >= 0) {
    write_all(t.descriptor, text, file);
    return;
  }
  const std::string& target = t.path;
  const bool exists = t.exists;
  const struct stat& st = t.st;
  if (exists && !S_ISREG(st.st_mode)) {
    // A device, FIFO or socket is written into, never replaced: `-o /dev/null` must leave
    // /dev/null a device, also for root.
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    HIOS_CHECK(fd >= 0, "%s: cannot open for writing: %s", file.c_str(), std::strerror(errno));
    try {
      write_all(fd, text, file);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(g_write_mu);
  install_cleanup_handlers();
  // The temporary file sits beside the target under a short name of its own (the target's name
  // may already be NAME_MAX long), made with O_EXCL: nobody else's file is ever touched.
  const size_t cut = target.rfind('/');
  const std::string folder = cut == std::string::npos ? "" : target.substr(0, cut + 1);
  static std::atomic<unsigned> serial{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = folder + ".hios-tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
    HIOS_CHECK(tmp.size() < sizeof g_pending, "%s: path too long", file.c_str());
    std::memcpy(g_pending, tmp.c_str(), tmp.size() + 1);
    g_has_pending = true;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? (st.st_mode & 07777) : 0666);
    if (fd < 0) g_has_pending = false;
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw_error("%s: cannot write: %s", file.c_str(), std::strerror(errno));
  auto fail = [&](const char* what, int err) {
    ::unlink(tmp.c_str());
    g_has_pending = false;
    throw_error("%s: %s: %s", file.c_str(), what, std::strerror(err));
  };
  // The umask narrowed the mode of a replaced file: give it back what it had.
  if (exists && ::fchmod(fd, st.st_mode & 07777) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot keep the file's mode", err);
  }
  try {
    write_all(fd, text, file);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    g_has_pending = false;
    throw;
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fsync failed", err);
  }
  if (::close(fd) != 0) fail("close failed", errno);
  if (::rename(tmp.c_str(), target.c_str()) != 0) fail("cannot rename the temporary file into place", errno);
  g_has_pending = false;
  // The rename is durable once the folder is.
  const int dfd = ::open(folder_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace hios
