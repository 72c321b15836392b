// GGUF metadata values: the 13 on-disk value types, arrays nested to any depth. Typed getters
// throw errors that name the key and the type found, so a model loader can say exactly which key
// of a file is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

std::string_view value_type_name(ValueType t);
bool is_valid_value_type(uint32_t t);

struct Value;
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;
};

// One metadata value. Integers keep their sign in the variant; `type` keeps the exact width so
// that a round trip through the writer reproduces the file byte for byte.
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> data;

  static Value u8(uint8_t v) { return {ValueType::UINT8, uint64_t{v}}; }
  static Value u16(uint16_t v) { return {ValueType::UINT16, uint64_t{v}}; }
  static Value u32(uint32_t v) { return {ValueType::UINT32, uint64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::UINT64, v}; }
  static Value i8(int8_t v) { return {ValueType::INT8, int64_t{v}}; }
  static Value i16(int16_t v) { return {ValueType::INT16, int64_t{v}}; }
  static Value i32(int32_t v) { return {ValueType::INT32, int64_t{v}}; }
  static Value i64(int64_t v) { return {ValueType::INT64, v}; }
  static Value f32(float v) { return {ValueType::FLOAT32, double{v}}; }
  static Value f64(double v) { return {ValueType::FLOAT64, v}; }
  static Value boolean(bool v) { return {ValueType::BOOL, v}; }
  static Value str(std::string v) { return {ValueType::STRING, std::move(v)}; }
  static Value array(ValueType elem, std::vector<Value> items);
  static Value str_array(const std::vector<std::string>& v);
  static Value f32_array(const std::vector<float>& v);
  static Value i32_array(const std::vector<int32_t>& v);

  bool is_integer() const;
  bool is_number() const { return is_integer() || type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
  const Array& arr() const { return *std::get<std::shared_ptr<Array>>(data); }
  const std::string& str() const { return std::get<std::string>(data); }
  // Numeric views; callers check is_integer()/is_number() first.
  int64_t as_i64() const;
  uint64_t as_u64() const;
  double as_f64() const;
  // For messages and `inspect`: scalars in full, arrays abbreviated.
  std::string to_display(size_t max_items = 8) const;
};

bool operator==(const Value& a, const Value& b);

}  // namespace sluice::gguf
