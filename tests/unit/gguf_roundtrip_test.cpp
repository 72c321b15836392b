// GGUF writer → reader round trip: metadata (every value type, nested arrays) and tensor bytes
// come back identical, and the file bytes are stable across a second write.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "test_util.h"

using namespace sluice;
using namespace sluice::gguf;

namespace {

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

Writer make_writer(const std::vector<float>& a, const std::vector<uint8_t>& q) {
  Writer w;
  w.set("general.architecture", Value::str("llama"));
  w.set("u8", Value::u8(200));
  w.set("i8", Value::i8(-100));
  w.set("u16", Value::u16(60000));
  w.set("i16", Value::i16(-30000));
  w.set("u32", Value::u32(4000000000u));
  w.set("i32", Value::i32(-2000000000));
  w.set("u64", Value::u64(1ull << 60));
  w.set("i64", Value::i64(-(1ll << 60)));
  w.set("f32", Value::f32(1.5f));
  w.set("f64", Value::f64(-2.25));
  w.set("bool", Value::boolean(true));
  w.set("strs", Value::str_array({"a", "", "ünïcode"}));
  w.set("nested", Value::array(ValueType::ARRAY, {Value::i32_array({1, 2}), Value::i32_array({})}));
  w.add_tensor_bytes("a", GgmlType::F32, {4, 3}, a.data());
  w.add_tensor_bytes("q", GgmlType::Q8_0, {64}, q.data());
  return w;
}

}  // namespace

TEST(GgufRoundTrip, MetadataAndTensorsSurvive) {
  std::vector<float> a(12);
  for (int i = 0; i < 12; ++i) a[i] = static_cast<float>(i) * 0.5f - 3;
  std::vector<uint8_t> q(68);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 7);
  Writer w = make_writer(a, q);
  const std::string path = (test::scratch_dir() / "rt.gguf").string();
  w.write(path);

  auto f = File::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("u8"), 200);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_int("u16"), 60000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->find("u64")->as_u64(), 1ull << 60);
  EXPECT_EQ(f->get_int("i64"), -(1ll << 60));
  EXPECT_EQ(f->get_float("f32"), 1.5);
  EXPECT_EQ(f->get_float("f64"), -2.25);
  EXPECT_TRUE(f->get_bool_or("bool", false));
  EXPECT_EQ(f->get_string_array("strs"), (std::vector<std::string>{"a", "", "ünïcode"}));
  const Value* nested = f->find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arr().items.size(), 2u);
  EXPECT_EQ(nested->arr().items[0].arr().items[1].as_i64(), 2);
  EXPECT_EQ(f->metadata().size(), 14u);

  const TensorInfo& ta = f->tensor("a");
  EXPECT_EQ(ta.ne[0], 4);
  EXPECT_EQ(ta.ne[1], 3);
  EXPECT_EQ(ta.nbytes, 48u);
  EXPECT_EQ(ta.file_offset % 32, 0u);
  EXPECT_EQ(std::memcmp(ta.data, a.data(), 48), 0);
  const TensorInfo& tq = f->tensor("q");
  EXPECT_EQ(tq.type, GgmlType::Q8_0);
  EXPECT_EQ(tq.nbytes, 68u);
  EXPECT_EQ(std::memcmp(tq.data, q.data(), 68), 0);

  // Rewriting everything read reproduces the file byte for byte.
  Writer w2;
  for (const auto& [k, v] : f->metadata()) w2.set(k, v);
  for (const auto& t : f->tensors())
    w2.add_tensor_bytes(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data);
  const std::string path2 = (test::scratch_dir() / "rt2.gguf").string();
  w2.write(path2);
  EXPECT_EQ(slurp(path), slurp(path2));
}

TEST(GgufRoundTrip, TypedGetterErrorsNameTheKey) {
  std::vector<float> a(12);
  std::vector<uint8_t> q(68);
  Writer w = make_writer(a, q);
  const std::string path = (test::scratch_dir() / "rt3.gguf").string();
  w.write(path);
  auto f = File::open(path);
  try {
    f->get_int("general.architecture");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "metadata key 'general.architecture' has type string, expected an integer");
  }
  EXPECT_THROW(f->tensor("missing"), Error);
  EXPECT_EQ(f->get_int_or("absent", 7), 7);
}

// Found by the fuzzer: a float64 key far outside int64 or float range must be an error naming the
// key, never an undefined cast.
TEST(GgufRoundTrip, OutOfRangeFloatsAreErrors) {
  std::vector<float> a(12);
  std::vector<uint8_t> q(68);
  Writer w = make_writer(a, q);
  w.set("huge", Value::f64(1e300));
  w.set("nan", Value::f64(std::nan("")));
  w.set("huge_arr", Value::array(ValueType::FLOAT64, {Value::f64(1.0), Value::f64(-1e300)}));
  const std::string path = (test::scratch_dir() / "rt4.gguf").string();
  w.write(path);
  auto f = File::open(path);
  EXPECT_THROW(f->find("huge")->as_i64(), Error);
  EXPECT_THROW(f->find("nan")->as_i64(), Error);
  try {
    f->get_float("huge");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "metadata key 'huge' is 1e+300, expected a finite number within float range");
  }
  EXPECT_THROW(f->get_float("nan"), Error);
  EXPECT_THROW(f->get_float_array("huge_arr"), Error);
  EXPECT_DOUBLE_EQ(f->get_float("f64"), -2.25);
}
