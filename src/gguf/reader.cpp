// GGUF reader. The header is parsed from the mmap through a bounds-checked cursor; nothing is
// trusted: counts are bounded by the bytes left, sizes use overflow-checked arithmetic, and each
// tensor's data range must lie inside its part's data section.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "gguf/gguf.h"

namespace sluice::gguf {

namespace {

constexpr uint32_t kMaxNesting = 8;

// Reads little-endian fields from a source and fails with the file name and byte offset.
class Cursor {
 public:
  explicit Cursor(ByteSource& src) : src_(src), size_(src.size()), path_(src.name()) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > left())
      fail("{}: truncated while reading {} at byte {}: need {} bytes, {} left", path_, what, pos_,
           n, left());
  }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, src_.bytes(pos_, sizeof(T)), sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(std::string_view what) {
    uint64_t len = read<uint64_t>(what);
    if (len > left())
      fail("{}: {} has length {} but only {} bytes remain in the file", path_, what, len, left());
    std::string s(reinterpret_cast<const char*>(src_.bytes(pos_, len)), len);
    pos_ += len;
    return s;
  }
  void skip_to(uint64_t p) { pos_ = p; }
  const std::string& path() const { return path_; }

 private:
  ByteSource& src_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: case ValueType::STRING:
      return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

Value read_value(Cursor& c, ValueType type, const std::string& key, uint32_t depth) {
  switch (type) {
    case ValueType::UINT8: return Value::u8(c.read<uint8_t>(key));
    case ValueType::INT8: return Value::i8(c.read<int8_t>(key));
    case ValueType::UINT16: return Value::u16(c.read<uint16_t>(key));
    case ValueType::INT16: return Value::i16(c.read<int16_t>(key));
    case ValueType::UINT32: return Value::u32(c.read<uint32_t>(key));
    case ValueType::INT32: return Value::i32(c.read<int32_t>(key));
    case ValueType::UINT64: return Value::u64(c.read<uint64_t>(key));
    case ValueType::INT64: return Value::i64(c.read<int64_t>(key));
    case ValueType::FLOAT32: return Value::f32(c.read<float>(key));
    case ValueType::FLOAT64: return Value::f64(c.read<double>(key));
    case ValueType::BOOL: {
      uint8_t b = c.read<uint8_t>(key);
      if (b > 1) fail("{}: key '{}': bool value {} is neither 0 nor 1", c.path(), key, b);
      return Value::boolean(b != 0);
    }
    case ValueType::STRING: return Value::str(c.read_string("value of key '" + key + "'"));
    case ValueType::ARRAY: {
      if (depth >= kMaxNesting)
        fail("{}: key '{}': arrays nested deeper than {} levels", c.path(), key, kMaxNesting);
      uint32_t et = c.read<uint32_t>(key);
      if (!is_valid_value_type(et))
        fail("{}: key '{}': array element type {} is not a GGUF value type (0..12)", c.path(), key, et);
      uint64_t n = c.read<uint64_t>(key);
      uint64_t min_bytes = 0;
      if (mul_overflows(n, min_value_bytes(static_cast<ValueType>(et)), &min_bytes) ||
          min_bytes > c.left())
        fail("{}: key '{}': array of {} {} elements does not fit in the {} bytes left", c.path(),
             key, n, value_type_name(static_cast<ValueType>(et)), c.left());
      std::vector<Value> items;
      items.reserve(n);
      for (uint64_t i = 0; i < n; ++i)
        items.push_back(read_value(c, static_cast<ValueType>(et), key, depth + 1));
      return Value::array(static_cast<ValueType>(et), std::move(items));
    }
  }
  fail("{}: key '{}': invalid value type {}", c.path(), key, static_cast<uint32_t>(type));
}

[[noreturn]] void type_error(std::string_view key, const Value& v, std::string_view expected) {
  std::string found(value_type_name(v.type));
  if (v.type == ValueType::ARRAY) found = fmt::format("array of {}", value_type_name(v.arr().elem_type));
  fail("metadata key '{}' has type {}, expected {}", key, found, expected);
}

}  // namespace

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

std::optional<std::string> split_part_path(const std::string& first_path, int part, int count) {
  // PREFIX-00001-of-00003.gguf
  const std::string suffix = fmt::format("-{:05d}-of-{:05d}.gguf", 1, count);
  if (first_path.size() < suffix.size() ||
      first_path.compare(first_path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  return first_path.substr(0, first_path.size() - suffix.size()) +
         fmt::format("-{:05d}-of-{:05d}.gguf", part, count);
}

File::~File() = default;

uint64_t File::total_size() const {
  uint64_t s = 0;
  for (const auto& p : parts_) s += p.size;
  return s;
}

std::unique_ptr<File> File::open(const std::string& path) { return open(path, open_mapped); }

std::unique_ptr<File> File::open(const std::string& path, const SourceOpener& opener) {
  std::unique_ptr<File> f(new File());
  auto open_part = [&](const std::string& p) {
    Part part;
    part.source = opener(p);
    part.path = part.source->name();
    part.size = part.source->size();
    f->parts_.push_back(std::move(part));
  };
  open_part(path);
  f->parse_part(0, true);

  const Value* count_v = f->find("split.count");
  int64_t count = count_v ? f->get_int("split.count") : 1;
  if (count < 1 || count > 9999) fail("{}: split.count is {}, expected 1..9999", path, count);
  if (count > 1) {
    if (f->get_int_or("split.no", 0) != 0)
      fail("{}: split.no is {}, expected 0: open the first part (-00001-of-{:05d}.gguf)", path,
           f->get_int("split.no"), count);
    for (int k = 2; k <= count; ++k) {
      auto p = split_part_path(path, k, static_cast<int>(count));
      if (!p) fail("{}: split.count is {} but the name does not end in -00001-of-{:05d}.gguf", path, count, count);
      open_part(*p);
      f->parse_part(static_cast<size_t>(k - 1), false);
    }
    int64_t expect = f->get_int_or("split.tensors.count", static_cast<int64_t>(f->tensors_.size()));
    if (expect != static_cast<int64_t>(f->tensors_.size()))
      fail("{}: split.tensors.count is {} but the {} parts hold {} tensors", path, expect, count,
           f->tensors_.size());
  }
  std::unordered_set<std::string_view> names;
  for (const auto& t : f->tensors_)
    if (!names.insert(t.name).second) fail("{}: tensor '{}' appears twice", path, t.name);
  return f;
}

void File::parse_part(size_t index, bool is_first) {
  Part& part = parts_[index];
  Cursor c(*part.source);
  c.need(4, "magic");
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != 0x46554747u)  // "GGUF" little-endian
    fail("{}: not a GGUF file (magic {:08x}, expected 46554747 \"GGUF\")", part.path, magic);
  uint32_t version = c.read<uint32_t>("version");
  if (version == 0x02000000u || version == 0x03000000u)
    fail("{}: big-endian GGUF is not supported", part.path);
  if (version == 1) fail("{}: GGUF version 1 is obsolete; convert the model again (versions 2 and 3 are supported)", part.path);
  if (version != 2 && version != 3)
    fail("{}: GGUF version {} is not supported (expected 2 or 3)", part.path, version);
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each KV needs at least key length (8) + type (4) + 1 byte; each tensor info at least 8+4+8+4+8.
  if (n_kv > c.left() / 13)
    fail("{}: metadata count {} cannot fit in a file of {} bytes", part.path, n_kv, part.size);
  if (n_tensors > c.left() / 32)
    fail("{}: tensor count {} cannot fit in a file of {} bytes", part.path, n_tensors, part.size);
  if (is_first) version_ = version;

  std::vector<std::pair<std::string, Value>> kv;
  std::unordered_set<std::string> keys;
  uint32_t alignment = kDefaultAlignment;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string(fmt::format("metadata key #{}", i));
    uint32_t t = c.read<uint32_t>(key);
    if (!is_valid_value_type(t))
      fail("{}: key '{}' has value type {}, expected 0..12", part.path, key, t);
    Value v = read_value(c, static_cast<ValueType>(t), key, 0);
    if (key == "general.alignment") {
      if (v.type != ValueType::UINT32) fail("{}: general.alignment has type {}, expected uint32", part.path, value_type_name(v.type));
      uint64_t a = v.as_u64();
      if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
        fail("{}: general.alignment is {}, expected a power of two up to 1 MiB", part.path, a);
      alignment = static_cast<uint32_t>(a);
    }
    if (!keys.insert(key).second) fail("{}: metadata key '{}' appears twice", part.path, key);
    kv.emplace_back(std::move(key), std::move(v));
  }
  if (is_first) {
    kv_ = std::move(kv);
    alignment_ = alignment;
  } else {
    auto find_kv = [&](std::string_view key) {
      auto it = std::find_if(kv.begin(), kv.end(), [&](auto& p) { return p.first == key; });
      return it == kv.end() ? nullptr : &it->second;
    };
    const Value* no = find_kv("split.no");
    if (!no || !no->is_integer() || no->as_i64() != static_cast<int64_t>(index))
      fail("{}: expected split.no = {} in this part", part.path, index);
    // Parts of two different splits of one model can share a prefix; the counts tell them apart.
    const Value* count = find_kv("split.count");
    const int64_t first_count = get_int("split.count");
    if (count && (!count->is_integer() || count->as_i64() != first_count))
      fail("{}: split.count is {} in this part but {} in the first part", part.path, count->to_display(),
           first_count);
  }

  const size_t first_tensor = tensors_.size();
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.read_string(fmt::format("name of tensor #{}", i));
    uint32_t n_dims = c.read<uint32_t>(t.name);
    if (n_dims == 0 || n_dims > kMaxDims)
      fail("{}: tensor '{}' has {} dimensions, expected 1..{}", part.path, t.name, n_dims, kMaxDims);
    t.n_dims = static_cast<int>(n_dims);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t ne = c.read<int64_t>(t.name);
      if (ne <= 0) fail("{}: tensor '{}' dimension {} is {}, expected > 0", part.path, t.name, d, ne);
      t.ne[d] = ne;
      if (mul_overflows(n_el, static_cast<uint64_t>(ne), &n_el) || n_el > (uint64_t{1} << 62))
        fail("{}: tensor '{}' element count overflows", part.path, t.name);
    }
    uint32_t type_id = c.read<uint32_t>(t.name);
    auto traits = find_type(type_id);
    if (!traits) fail("{}: tensor '{}' has unknown GGML type id {}", part.path, t.name, type_id);
    t.type = traits->type;
    if (t.ne[0] % traits->block_elems != 0)
      fail("{}: tensor '{}' ({}) row length {} is not a multiple of the {}-value block", part.path,
           t.name, traits->name, t.ne[0], traits->block_elems);
    uint64_t offset = c.read<uint64_t>(t.name);
    if (offset % alignment != 0)
      fail("{}: tensor '{}' offset {} is not a multiple of the alignment {}", part.path, t.name, offset, alignment);
    t.nbytes = n_el / traits->block_elems * traits->block_bytes;
    t.file_index = static_cast<uint32_t>(index);
    t.file_offset = offset;  // relative for now, made absolute once the data section is known
    tensors_.push_back(std::move(t));
  }

  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (n_tensors > 0 && data_start > part.size)
    fail("{}: data section would start at byte {} past the end of the file ({} bytes)", part.path, data_start, part.size);
  for (size_t i = first_tensor; i < tensors_.size(); ++i) {
    TensorInfo& t = tensors_[i];
    uint64_t begin = 0, end = 0;
    if (add_overflows(data_start, t.file_offset, &begin) || add_overflows(begin, t.nbytes, &end) ||
        end > part.size)
      fail("{}: tensor '{}' ({} {}, {} bytes at data offset {}) extends past the end of the file "
           "({} bytes): the file is truncated or the offset is corrupt",
           part.path, t.name, type_name(t.type), t.shape_string(), t.nbytes, t.file_offset, part.size);
    t.file_offset = begin;
    t.data = part.source->map() ? part.source->map() + begin : nullptr;
  }
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

std::string File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) fail("metadata key '{}' is missing", key);
  if (v->type != ValueType::STRING) type_error(key, *v, "string");
  return v->str();
}

std::string File::get_string_or(std::string_view key, std::string fallback) const {
  return find(key) ? get_string(key) : std::move(fallback);
}

int64_t File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) fail("metadata key '{}' is missing", key);
  if (!v->is_integer()) type_error(key, *v, "an integer");
  return v->as_i64();
}

int64_t File::get_int_or(std::string_view key, int64_t fallback) const {
  return find(key) ? get_int(key) : fallback;
}

double File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) fail("metadata key '{}' is missing", key);
  if (!v->is_number()) type_error(key, *v, "a number");
  const double d = v->as_f64();
  // Callers narrow to float; a value outside float's range (or NaN) is never a valid setting.
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
    fail("metadata key '{}' is {}, expected a finite number within float range", key, d);
  return d;
}

double File::get_float_or(std::string_view key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

bool File::get_bool_or(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type == ValueType::BOOL) return std::get<bool>(v->data);
  if (v->is_integer()) return v->as_i64() != 0;
  type_error(key, *v, "bool");
}

std::vector<std::string> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return {};
  if (v->type != ValueType::ARRAY || v->arr().elem_type != ValueType::STRING)
    type_error(key, *v, "array of string");
  std::vector<std::string> out;
  out.reserve(v->arr().items.size());
  for (const auto& it : v->arr().items) out.push_back(it.str());
  return out;
}

std::vector<float> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return {};
  if (v->type != ValueType::ARRAY || !Value{v->arr().elem_type, uint64_t{0}}.is_number())
    type_error(key, *v, "array of numbers");
  std::vector<float> out;
  out.reserve(v->arr().items.size());
  for (const auto& it : v->arr().items) {
    const double d = it.as_f64();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
      fail("metadata key '{}' holds {}, expected finite numbers within float range", key, d);
    out.push_back(static_cast<float>(d));
  }
  return out;
}

std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return {};
  if (v->type != ValueType::ARRAY || !Value{v->arr().elem_type, uint64_t{0}}.is_integer())
    type_error(key, *v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v->arr().items.size());
  for (const auto& it : v->arr().items) out.push_back(it.as_i64());
  return out;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("tensor '{}' is missing from the model", name);
  return *t;
}

}  // namespace sluice::gguf
