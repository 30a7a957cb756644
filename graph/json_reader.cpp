#include "graph/json_reader.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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
  if (v.is_number_integer()) {
    int a = static_cast<int>(v.get<int64_t>());
    return {a, a};
  }
  HIOS_CHECK(v.is_array() && v.size() == 2, "%s: expected [int, int], got %s", p.c_str(), json_type_name(v));
  return {static_cast<int>(json_int(v[0], p + "[0]")), static_cast<int>(json_int(v[1], p + "[1]"))};
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
  return j.get<int64_t>();
}

double json_number(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_number(), "%s: expected a number, got %s", path.c_str(), json_type_name(j));
  return j.get<double>();
}

std::string json_string(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_string(), "%s: expected a string, got %s", path.c_str(), json_type_name(j));
  return j.get<std::string>();
}

const json& json_array(const json& j, const std::string& path) {
  HIOS_CHECK(j.is_array(), "%s: expected an array, got %s", path.c_str(), json_type_name(j));
  return j;
}

json parse_json_text(const std::string& text, const std::string& source_name) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(strprintf("%s: malformed JSON at byte %zu", source_name.c_str(), e.byte));
  }
}

json read_json_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  HIOS_CHECK(in.good(), "%s: cannot open: %s", file.c_str(), std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), file);
}

void write_file_atomic(const std::string& file, const std::string& text) {
  std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    HIOS_CHECK(out.good(), "%s: cannot write: %s", file.c_str(), std::strerror(errno));
    out << text;
    out.flush();
    if (!out.good()) {
      std::remove(tmp.c_str());
      throw_error("%s: write failed", file.c_str());
    }
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw_error("%s: cannot rename temporary file into place: %s", file.c_str(), std::strerror(err));
  }
}

}  // namespace hios
