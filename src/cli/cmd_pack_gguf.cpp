// `sluice pack-gguf MANIFEST.json -o OUT.gguf`: builds a GGUF from a JSON manifest of metadata
// and raw tensor bytes, so training scripts (tools/train-tiny-moe/export.py) produce model files
// through our own writer instead of a second GGUF implementation.
//
// Manifest:
//   { "alignment": 32,                                    (optional)
//     "metadata": [ {"key": K, "type": T, "value": V},
//                   {"key": K, "type": "array", "elem_type": T, "value": [V, ...]}, ... ],
//     "tensors":  [ {"name": N, "type": "Q8_0", "dims": [ne0, ne1, ...],   (GGML order)
//                    "file": F, "offset": O, "bytes": B}, ... ] }
// T is a GGUF value type name as value_type_name() spells it (uint8 ... float64, bool, string).
// Tensor files are relative to the manifest's folder; bytes are streamed from them at write time,
// so the manifest's tensors never all sit in memory.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "gguf/writer.h"

namespace sluice::cli {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

gguf::ValueType parse_value_type(const std::string& name, const std::string& where) {
  for (uint32_t t = 0; gguf::is_valid_value_type(t); ++t) {
    auto vt = static_cast<gguf::ValueType>(t);
    if (gguf::value_type_name(vt) == name) return vt;
  }
  fail("{}: unknown value type '{}'", where, name);
}

template <typename T>
T checked_int(const Json& j, const std::string& where) {
  if (!j.is_number_integer()) fail("{}: expected an integer, got {}", where, j.dump());
  if (j.is_number_unsigned()) {
    auto v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      fail("{}: {} does not fit the value type", where, v);
    return static_cast<T>(v);
  }
  auto v = j.get<int64_t>();
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max())))
    fail("{}: {} does not fit the value type", where, v);
  return static_cast<T>(v);
}

gguf::Value scalar_value(gguf::ValueType t, const Json& j, const std::string& where) {
  using VT = gguf::ValueType;
  using gguf::Value;
  switch (t) {
    case VT::UINT8: return Value::u8(checked_int<uint8_t>(j, where));
    case VT::INT8: return Value::i8(checked_int<int8_t>(j, where));
    case VT::UINT16: return Value::u16(checked_int<uint16_t>(j, where));
    case VT::INT16: return Value::i16(checked_int<int16_t>(j, where));
    case VT::UINT32: return Value::u32(checked_int<uint32_t>(j, where));
    case VT::INT32: return Value::i32(checked_int<int32_t>(j, where));
    case VT::UINT64: return Value::u64(checked_int<uint64_t>(j, where));
    case VT::INT64: return Value::i64(checked_int<int64_t>(j, where));
    case VT::FLOAT32:
    case VT::FLOAT64:
      if (!j.is_number()) fail("{}: expected a number, got {}", where, j.dump());
      return t == VT::FLOAT32 ? Value::f32(j.get<float>()) : Value::f64(j.get<double>());
    case VT::BOOL:
      if (!j.is_boolean()) fail("{}: expected true or false, got {}", where, j.dump());
      return Value::boolean(j.get<bool>());
    case VT::STRING:
      if (!j.is_string()) fail("{}: expected a string, got {}", where, j.dump());
      return Value::str(j.get<std::string>());
    case VT::ARRAY: break;
  }
  fail("{}: arrays of arrays are not supported", where);
}

const Json& field(const Json& obj, const char* name, const std::string& where) {
  if (!obj.is_object()) fail("{}: expected an object", where);
  auto it = obj.find(name);
  if (it == obj.end()) fail("{}: missing \"{}\"", where, name);
  return *it;
}

std::string string_field(const Json& obj, const char* name, const std::string& where) {
  const Json& j = field(obj, name, where);
  if (!j.is_string()) fail("{}: \"{}\" must be a string", where, name);
  return j.get<std::string>();
}

void add_metadata(gguf::Writer& w, const Json& items) {
  if (!items.is_array()) fail("manifest: \"metadata\" must be an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& m = items[i];
    std::string where = fmt::format("metadata[{}]", i);
    std::string key = string_field(m, "key", where);
    where = fmt::format("metadata '{}'", key);
    if (!seen.insert(key).second) fail("{}: duplicate key", where);
    gguf::ValueType t = parse_value_type(string_field(m, "type", where), where);
    const Json& v = field(m, "value", where);
    if (t != gguf::ValueType::ARRAY) {
      w.set(key, scalar_value(t, v, where));
      continue;
    }
    gguf::ValueType et = parse_value_type(string_field(m, "elem_type", where), where);
    if (!v.is_array()) fail("{}: \"value\" must be a JSON array", where);
    std::vector<gguf::Value> vals;
    vals.reserve(v.size());
    for (size_t k = 0; k < v.size(); ++k)
      vals.push_back(scalar_value(et, v[k], fmt::format("{}[{}]", where, k)));
    w.set(key, gguf::Value::array(et, std::move(vals)));
  }
}

void add_tensors(gguf::Writer& w, const Json& items, const fs::path& base) {
  if (!items.is_array()) fail("manifest: \"tensors\" must be an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& t = items[i];
    std::string name = string_field(t, "name", fmt::format("tensors[{}]", i));
    std::string where = fmt::format("tensor '{}'", name);
    if (!seen.insert(name).second) fail("{}: duplicate name", where);
    std::string type_name = string_field(t, "type", where);
    auto type = type_from_name(type_name);
    if (!type) fail("{}: unknown ggml type '{}'", where, type_name);
    const Json& dims = field(t, "dims", where);
    if (!dims.is_array()) fail("{}: \"dims\" must be an array", where);
    std::vector<int64_t> ne;
    for (const Json& d : dims) ne.push_back(checked_int<int64_t>(d, where + " dims"));
    fs::path file = base / string_field(t, "file", where);
    auto offset = checked_int<uint64_t>(field(t, "offset", where), where + " offset");
    auto bytes = checked_int<uint64_t>(field(t, "bytes", where), where + " bytes");

    // Validated here rather than in the fill callback, so a bad manifest fails before any
    // output is written.
    const TypeTraits& tt = type_traits(*type);
    uint64_t n = 1;
    for (int64_t d : ne) {
      if (d <= 0) fail("{}: dimension {} must be positive", where, d);
      if (mul_overflows(n, static_cast<uint64_t>(d), &n)) fail("{}: element count overflows", where);
    }
    if (ne.empty() || ne[0] % tt.block_elems != 0)
      fail("{}: row length must be a multiple of the {} block size {}", where, tt.name, tt.block_elems);
    uint64_t want = n / tt.block_elems * tt.block_bytes;
    if (bytes != want)
      fail("{}: {} bytes given, but {} {} values ({}) take {} bytes", where, bytes, n, tt.name,
           fmt::join(ne, "×"), want);
    std::error_code ec;
    uint64_t size = fs::file_size(file, ec);
    if (ec) fail("{}: cannot read '{}': {}", where, file.string(), ec.message());
    uint64_t end = 0;
    if (add_overflows(offset, bytes, &end) || end > size)
      fail("{}: bytes {}..{} lie past the end of '{}' ({} bytes)", where, offset, end, file.string(), size);

    w.add_tensor(name, *type, ne, [file, offset, where](std::byte* dst, size_t len) {
      std::ifstream in(file, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(offset));
      if (!in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(len)))
        fail("{}: reading {} bytes at offset {} of '{}' failed", where, len, offset, file.string());
    });
  }
}

}  // namespace

int cmd_pack_gguf(int argc, char** argv) {
  CLI::App app{"Write a GGUF file from a JSON manifest of metadata and raw tensor bytes", "sluice pack-gguf"};
  std::string manifest_path, out_path;
  app.add_option("manifest", manifest_path, "JSON manifest (see tools/train-tiny-moe/export.py)")->required();
  app.add_option("-o,--output", out_path, "GGUF file to write (through a temporary file renamed into place)")->required();
  bool force = false;
  app.add_flag("--force", force, "replace an existing output file");
  add_quiet_flag(app);
  SLUICE_PARSE(app, argc, argv);
  check_output(out_path, force);

  std::ifstream in(manifest_path);
  if (!in) fail("cannot open manifest '{}'", manifest_path);
  Json manifest = Json::parse(in, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object())
    fail("manifest '{}' is not a JSON object", manifest_path);

  uint32_t alignment = 32;
  if (manifest.contains("alignment")) {
    alignment = checked_int<uint32_t>(manifest["alignment"], "manifest alignment");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
      fail("manifest alignment {} is not a power of two", alignment);
  }
  gguf::Writer w(alignment);
  add_metadata(w, field(manifest, "metadata", "manifest"));
  add_tensors(w, field(manifest, "tensors", "manifest"),
              fs::absolute(manifest_path).parent_path());
  w.write(out_path);
  std::printf("wrote %s: %zu metadata keys, %zu tensors\n", out_path.c_str(),
              manifest["metadata"].size(), manifest["tensors"].size());
  return 0;
}

}  // namespace sluice::cli
