// Strict reading of JSON objects.
//
// Every loader in hios (graphs, schedules, device presets, profile databases) reads through
// JsonObject so that the same rules hold everywhere: a missing required key, a value of the
// wrong type, or a key nobody asked for is an hios::Error naming the JSON path, e.g.
// "$.blocks[2].nodes[5].kernal: unknown key". This is the TVM graph-executor lesson: a typo in
// a hand-edited file must never be silently ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace hios {

// Ordered, so that written files keep a readable key order and round-trip byte for byte.
using json = nlohmann::ordered_json;

// Human name of a JSON value's type, for error messages.
const char* json_type_name(const json& j);

class JsonObject {
 public:
  // Throws if j is not an object.
  JsonObject(const json& j, std::string path);

  const std::string& path() const { return path_; }
  std::string child_path(const std::string& key) const { return path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key); }

  // Required accessors throw "<path>.<key>: missing" when the key is absent.
  const json& at(const std::string& key);
  int64_t get_int(const std::string& key);
  int64_t get_int_in(const std::string& key, int64_t lo, int64_t hi);  // range-checked
  double get_number(const std::string& key);  // finite
  bool get_bool(const std::string& key);
  std::string get_string(const std::string& key);
  const json& get_array(const std::string& key);
  const json& get_object(const std::string& key);

  // Optional accessors return the default when the key is absent (but still type-check).
  int64_t get_int(const std::string& key, int64_t def);
  double get_number(const std::string& key, double def);
  bool get_bool(const std::string& key, bool def);
  std::string get_string(const std::string& key, const std::string& def);
  // A pair of integers written as [a, b]; a single integer a means [a, a].
  std::array<int, 2> get_pair(const std::string& key, std::array<int, 2> def);

  // Reads the "format" and "version" keys every hios file starts with and checks them.
  void expect_header(const char* format, int version);

  // Marks a key as understood without reading it (for keys parsed elsewhere).
  void accept(const std::string& key) { used_.insert(key); }

  // Throws on the first key that no accessor asked for.
  void finish() const;

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> used_;
};

// Free-standing typed checks for array elements and nested values.
int64_t json_int(const json& j, const std::string& path);
int64_t json_int_in(const json& j, const std::string& path, int64_t lo, int64_t hi);
double json_number(const json& j, const std::string& path);
std::string json_string(const json& j, const std::string& path);
const json& json_array(const json& j, const std::string& path);

// Parses text as JSON; a syntax error names the file and the byte offset, a duplicate key in
// an object or a number out of double's range is refused with one line.
json parse_json_text(const std::string& text, const std::string& source_name);
// The largest input file hios reads: 1 GiB (the biggest graph a built-in model writes at 2048
// is well under 1 MiB). A directory, a larger file or an endless stream is refused.
inline constexpr uint64_t kMaxInputBytes = uint64_t(1) << 30;
// Deepest nesting of arrays and objects any JSON input may have (hios's own formats need < 10).
inline constexpr int kMaxJsonDepth = 256;
json read_json_file(const std::string& file);
// A whole input file (regular, a pipe or a device), refused past kMaxInputBytes, with errors
// naming the file; `kind` names what a directory given in its place is not ("JSON file").
std::string read_input_file(const std::string& file, const char* kind);

// Writes text to `file` so that a crash or a signal never leaves a half-written result:
//  * a regular file (or none yet) is replaced atomically: a temporary file in the same folder,
//    written, fsync'ed and renamed over it, keeping the old file's permissions; the temporary
//    file is removed on an error and on SIGINT/SIGTERM;
//  * a symlink is followed, and its target is what gets replaced;
//  * anything else that exists (/dev/null, /dev/stdout, a FIFO) is written in place, never
//    replaced;
//  * a target nobody may write (mode without any w bit) is refused, also for root.
void write_file_atomic(const std::string& file, const std::string& text);

// Throws the error write_file_atomic would give for `file` if it cannot be written at all (a
// folder, a symlink loop, a read-only file, a missing or read-only folder, a name too long),
// writing nothing: for checks before a long job whose results go there. With makes_folders,
// missing folders on the way are fine when the nearest existing one takes new entries (the
// writer makes them first).
void check_writable(const std::string& file, bool makes_folders = false);

}  // namespace hios
