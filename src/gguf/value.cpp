// GGUF value helpers.
#include "gguf/value.h"

#include <fmt/format.h>

#include "core/error.h"

namespace sluice::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "invalid";
}

bool is_valid_value_type(uint32_t t) { return t <= 12; }

Value Value::array(ValueType elem, std::vector<Value> items) {
  auto a = std::make_shared<Array>();
  a->elem_type = elem;
  a->items = std::move(items);
  return {ValueType::ARRAY, std::move(a)};
}

Value Value::str_array(const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(str(s));
  return array(ValueType::STRING, std::move(items));
}

Value Value::f32_array(const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(f32(x));
  return array(ValueType::FLOAT32, std::move(items));
}

Value Value::i32_array(const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(i32(x));
  return array(ValueType::INT32, std::move(items));
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

int64_t Value::as_i64() const {
  if (auto* u = std::get_if<uint64_t>(&data)) return static_cast<int64_t>(*u);
  if (auto* i = std::get_if<int64_t>(&data)) return *i;
  if (auto* d = std::get_if<double>(&data)) {
    // Casting a double outside int64's range is undefined behaviour; a file may hold any double.
    if (!(*d >= -9.2233720368547758e18 && *d < 9.2233720368547758e18))
      fail("floating-point value {} does not fit a 64-bit integer", *d);
    return static_cast<int64_t>(*d);
  }
  if (auto* b = std::get_if<bool>(&data)) return *b ? 1 : 0;
  return 0;
}

uint64_t Value::as_u64() const {
  if (auto* u = std::get_if<uint64_t>(&data)) return *u;
  return static_cast<uint64_t>(as_i64());
}

double Value::as_f64() const {
  if (auto* d = std::get_if<double>(&data)) return *d;
  if (auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  return static_cast<double>(as_i64());
}

std::string Value::to_display(size_t max_items) const {
  switch (type) {
    case ValueType::STRING: {
      const std::string& s = str();
      if (s.size() > 120) return fmt::format("\"{}…\" ({} bytes)", s.substr(0, 120), s.size());
      return fmt::format("\"{}\"", s);
    }
    case ValueType::BOOL: return std::get<bool>(data) ? "true" : "false";
    case ValueType::FLOAT32: case ValueType::FLOAT64: return fmt::format("{:g}", as_f64());
    case ValueType::ARRAY: {
      const Array& a = arr();
      std::string out = fmt::format("[{} × {}]", a.items.size(), value_type_name(a.elem_type));
      if (a.items.empty()) return out;
      out += " [";
      for (size_t i = 0; i < a.items.size() && i < max_items; ++i) {
        if (i) out += ", ";
        out += a.items[i].to_display(max_items);
      }
      if (a.items.size() > max_items) out += ", …";
      return out + "]";
    }
    default:
      if (std::holds_alternative<int64_t>(data)) return fmt::format("{}", std::get<int64_t>(data));
      return fmt::format("{}", std::get<uint64_t>(data));
  }
}

bool operator==(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  if (a.type == ValueType::ARRAY) {
    const Array& x = a.arr();
    const Array& y = b.arr();
    return x.elem_type == y.elem_type && x.items == y.items;
  }
  return a.data == b.data;
}

}  // namespace sluice::gguf
