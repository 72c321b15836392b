// GGUF reader hardening: a valid file from gguf::Writer is truncated at every offset and has single
// fields corrupted (magic, version, counts, lengths, value and element types, nesting, dims, type
// ids, offsets, alignment, duplicates); each must fail at open with its exact message. Split
// models: a 3-part model opens as one, and broken sets (missing part, wrong split.no, counts) fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "test_util.h"

using namespace sluice;
using namespace sluice::gguf;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<char>;

Bytes slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::string dump(const std::string& name, const Bytes& b) {
  const std::string p = (test::scratch_dir() / name).string();
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  return p;
}

// Offset just past the first GGUF string (u64 length + bytes) equal to `s`.
size_t after_string(const Bytes& b, const std::string& s) {
  const uint64_t len = s.size();
  Bytes needle(reinterpret_cast<const char*>(&len), reinterpret_cast<const char*>(&len) + 8);
  needle.insert(needle.end(), s.begin(), s.end());
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  if (it == b.end()) throw std::runtime_error("fixture lacks string " + s);
  return static_cast<size_t>(it - b.begin()) + needle.size();
}

template <typename T>
void poke(Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

std::vector<float> iota_floats(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// The fixture: metadata of several types and three tensors; alignment 32.
struct Fixture {
  std::vector<float> ta = iota_floats(12, 1), tb = iota_floats(8, 100);
  std::vector<uint8_t> tq = std::vector<uint8_t>(34, 7);
  Bytes bytes;
  uint64_t last_tensor_end = 0;

  Fixture() {
    Writer w;
    w.set("general.architecture", Value::str("llama"));
    w.set("t.u32", Value::u32(7));
    w.set("t.str", Value::str("hello"));
    w.set("t.arr", Value::i32_array({1, 2, 3}));
    w.set("t.bool", Value::boolean(true));
    w.set("dup.a", Value::u8(1));
    w.set("dup.b", Value::u8(2));
    w.add_tensor_bytes("ta", GgmlType::F32, {4, 3}, ta.data());
    w.add_tensor_bytes("tb", GgmlType::F32, {8}, tb.data());
    w.add_tensor_bytes("tq", GgmlType::Q8_0, {32}, tq.data());
    const std::string p = (test::scratch_dir() / "fixture.gguf").string();
    w.write(p);
    bytes = slurp(p);
    auto f = File::open(p);
    last_tensor_end = f->tensor("tq").file_offset + f->tensor("tq").nbytes;
  }
};

const Fixture& fixture() {
  static const Fixture fx;
  return fx;
}

// Opens `b` written as `name`, expecting failure with exactly "<path>: <msg>".
void expect_error(const std::string& name, const Bytes& b, const std::string& msg) {
  const std::string p = dump(name, b);
  try {
    File::open(p);
    ADD_FAILURE() << name << ": opened, expected: " << msg;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), p + ": " + msg) << name;
  }
}

std::string open_error(const std::string& path) {
  try {
    File::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(opened)";
}

}  // namespace

TEST(GgufCorrupt, FixtureIsValid) {
  const Fixture& fx = fixture();
  auto f = File::open(dump("valid.gguf", fx.bytes));
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(std::memcmp(f->tensor("tb").data, fx.tb.data(), 32), 0);
  EXPECT_LT(fx.last_tensor_end, fx.bytes.size() + 1);
}

TEST(GgufCorrupt, TruncatedAtEveryOffset) {
  const Fixture& fx = fixture();
  const std::string p = dump("cut.gguf", fx.bytes);
  for (size_t cut = fx.bytes.size(); cut-- > 0;) {
    fs::resize_file(p, cut);
    // Only the zero padding after the last tensor may be cut away.
    if (cut >= fx.last_tensor_end) {
      EXPECT_NO_THROW(File::open(p)) << "cut at " << cut;
      continue;
    }
    try {
      File::open(p);
      ADD_FAILURE() << "cut at " << cut << " opened";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << msg;
      EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("remain in the file") != std::string::npos ||
                  msg.find("cannot fit in a file") != std::string::npos ||
                  msg.find("does not fit in the") != std::string::npos ||
                  msg.find("past the end of the file") != std::string::npos)
          << "cut at " << cut << ": " << msg;
    }
  }
}

TEST(GgufCorrupt, TruncationMessages) {
  const Bytes& b = fixture().bytes;
  expect_error("empty.gguf", {}, "truncated while reading magic at byte 0: need 4 bytes, 0 left");
  expect_error("cut6.gguf", Bytes(b.begin(), b.begin() + 6), "truncated while reading version at byte 4: need 4 bytes, 2 left");
  expect_error("cut20.gguf", Bytes(b.begin(), b.begin() + 20),
               "truncated while reading metadata count at byte 16: need 8 bytes, 4 left");
  const size_t ta_data = static_cast<size_t>(fixture().last_tensor_end) - 34 - 32 - 64;  // ta starts the data
  expect_error("cutdata.gguf", Bytes(b.begin(), b.begin() + static_cast<long>(ta_data) + 10),
               fmt::format("tensor 'ta' (F32 [4, 3], 48 bytes at data offset 0) extends past the end of the file ({} "
                           "bytes): the file is truncated or the offset is corrupt",
                           ta_data + 10));
}

TEST(GgufCorrupt, MagicAndVersion) {
  Bytes b = fixture().bytes;
  b[0] = 'X';
  expect_error("magic.gguf", b, "not a GGUF file (magic 46554758, expected 46554747 \"GGUF\")");
  for (uint32_t v : {1u, 4u, 0u}) {
    Bytes c = fixture().bytes;
    poke<uint32_t>(c, 4, v);
    expect_error(fmt::format("v{}.gguf", v), c,
                 v == 1 ? "GGUF version 1 is obsolete; convert the model again (versions 2 and 3 are supported)"
                        : fmt::format("GGUF version {} is not supported (expected 2 or 3)", v));
  }
  Bytes be = fixture().bytes;
  poke<uint32_t>(be, 4, 0x03000000u);
  expect_error("bigendian.gguf", be, "big-endian GGUF is not supported");
  Bytes v2 = fixture().bytes;
  poke<uint32_t>(v2, 4, 2);  // v2 and v3 share the layout
  EXPECT_EQ(File::open(dump("v2.gguf", v2))->version(), 2u);
}

TEST(GgufCorrupt, HugeCounts) {
  const size_t size = fixture().bytes.size();
  Bytes t = fixture().bytes;
  poke<uint64_t>(t, 8, uint64_t{1} << 60);
  expect_error("ntensors.gguf", t, fmt::format("tensor count {} cannot fit in a file of {} bytes", uint64_t{1} << 60, size));
  Bytes k = fixture().bytes;
  poke<uint64_t>(k, 16, ~uint64_t{0});
  expect_error("nkv.gguf", k, fmt::format("metadata count {} cannot fit in a file of {} bytes", ~uint64_t{0}, size));
  // Plausible but wrong counts run off the end of the header instead.
  Bytes k2 = fixture().bytes;
  poke<uint64_t>(k2, 16, 9);  // two more keys than present: the tensor infos are read as keys
  EXPECT_THROW(File::open(dump("nkv9.gguf", k2)), Error);
  Bytes arr = fixture().bytes;
  const size_t at = after_string(arr, "t.arr") + 4 + 4;  // past value type and element type
  poke<uint64_t>(arr, at, uint64_t{1} << 40);
  expect_error("arrcount.gguf", arr,
               fmt::format("key 't.arr': array of {} int32 elements does not fit in the {} bytes left", uint64_t{1} << 40,
                           size - at - 8));
}

TEST(GgufCorrupt, StringLengthsPastEof) {
  Bytes key = fixture().bytes;
  poke<uint64_t>(key, 24, uint64_t{1} << 50);  // length of the first key
  expect_error("keylen.gguf", key,
               fmt::format("metadata key #0 has length {} but only {} bytes remain in the file", uint64_t{1} << 50,
                           key.size() - 32));
  Bytes val = fixture().bytes;
  const size_t at = after_string(val, "t.str") + 4;
  poke<uint64_t>(val, at, val.size());
  expect_error("vallen.gguf", val,
               fmt::format("value of key 't.str' has length {} but only {} bytes remain in the file", val.size(),
                           val.size() - at - 8));
  Bytes name = fixture().bytes;
  const size_t name_at = after_string(name, "tb") - 2 - 8;
  poke<uint64_t>(name, name_at, ~uint64_t{0});
  expect_error("namelen.gguf", name,
               fmt::format("name of tensor #1 has length {} but only {} bytes remain in the file", ~uint64_t{0},
                           name.size() - name_at - 8));
}

TEST(GgufCorrupt, BadValueTypes) {
  Bytes t = fixture().bytes;
  poke<uint32_t>(t, after_string(t, "t.u32"), 13);
  expect_error("vtype.gguf", t, "key 't.u32' has value type 13, expected 0..12");
  Bytes e = fixture().bytes;
  poke<uint32_t>(e, after_string(e, "t.arr") + 4, 99);
  expect_error("etype.gguf", e, "key 't.arr': array element type 99 is not a GGUF value type (0..12)");
  Bytes bo = fixture().bytes;
  poke<uint8_t>(bo, after_string(bo, "t.bool") + 4, 2);
  expect_error("bool.gguf", bo, "key 't.bool': bool value 2 is neither 0 nor 1");
}

TEST(GgufCorrupt, NestedArrays) {
  Value deep = Value::i32_array({1});
  for (int i = 0; i < 7; ++i) deep = Value::array(ValueType::ARRAY, {deep});
  Writer ok;
  ok.set("deep", deep);  // 8 levels: the limit
  const std::string ok_path = (test::scratch_dir() / "nest8.gguf").string();
  ok.write(ok_path);
  auto f = File::open(ok_path);
  EXPECT_EQ(f->find("deep")->arr().items[0].arr().items.size(), 1u);

  Writer bad;
  bad.set("deep", Value::array(ValueType::ARRAY, {deep}));
  const std::string bad_path = (test::scratch_dir() / "nest9.gguf").string();
  bad.write(bad_path);
  EXPECT_EQ(open_error(bad_path), bad_path + ": key 'deep': arrays nested deeper than 8 levels");
}

TEST(GgufCorrupt, TensorDims) {
  for (uint32_t n : {0u, 5u}) {
    Bytes b = fixture().bytes;
    poke<uint32_t>(b, after_string(b, "ta"), n);
    expect_error(fmt::format("ndims{}.gguf", n), b, fmt::format("tensor 'ta' has {} dimensions, expected 1..4", n));
  }
  for (int64_t d : {int64_t{0}, int64_t{-3}}) {
    Bytes b = fixture().bytes;
    poke<int64_t>(b, after_string(b, "ta") + 4 + 8, d);
    expect_error(fmt::format("dim{}.gguf", d), b, fmt::format("tensor 'ta' dimension 1 is {}, expected > 0", d));
  }
  Bytes big = fixture().bytes;
  poke<int64_t>(big, after_string(big, "ta") + 4, int64_t{1} << 40);
  poke<int64_t>(big, after_string(big, "ta") + 12, int64_t{1} << 40);
  expect_error("overflow.gguf", big, "tensor 'ta' element count overflows");
  Bytes row = fixture().bytes;
  poke<int64_t>(row, after_string(row, "tq") + 4, 33);
  expect_error("row.gguf", row, "tensor 'tq' (Q8_0) row length 33 is not a multiple of the 32-value block");
}

TEST(GgufCorrupt, TypeIdOffsetAndData) {
  Bytes type = fixture().bytes;
  const size_t tb_type = after_string(type, "tb") + 4 + 8;  // one dimension
  poke<uint32_t>(type, tb_type, 4);                        // Q4_2, long removed
  expect_error("type4.gguf", type, "tensor 'tb' has unknown GGML type id 4");
  poke<uint32_t>(type, tb_type, 1000);
  expect_error("type1000.gguf", type, "tensor 'tb' has unknown GGML type id 1000");

  Bytes off = fixture().bytes;
  poke<uint64_t>(off, tb_type + 4, 70);
  expect_error("misaligned.gguf", off, "tensor 'tb' offset 70 is not a multiple of the alignment 32");
  poke<uint64_t>(off, tb_type + 4, 3200);
  expect_error("pasteof.gguf", off,
               fmt::format("tensor 'tb' (F32 [8], 32 bytes at data offset 3200) extends past the end of the file ({} "
                           "bytes): the file is truncated or the offset is corrupt",
                           off.size()));
  poke<uint64_t>(off, tb_type + 4, ~uint64_t{0} - 31);
  expect_error("offwrap.gguf", off,
               fmt::format("tensor 'tb' (F32 [8], 32 bytes at data offset {}) extends past the end of the file ({} "
                           "bytes): the file is truncated or the offset is corrupt",
                           ~uint64_t{0} - 31, off.size()));
}

TEST(GgufCorrupt, Duplicates) {
  Bytes k = fixture().bytes;
  k[after_string(k, "dup.b") - 1] = 'a';
  expect_error("dupkey.gguf", k, "metadata key 'dup.a' appears twice");
  Bytes t = fixture().bytes;
  t[after_string(t, "tb") - 1] = 'a';
  expect_error("duptensor.gguf", t, "tensor 'ta' appears twice");
}

TEST(GgufCorrupt, Alignment) {
  auto with_alignment = [](const std::string& name, Value v) {
    Writer w;
    w.set("general.alignment", v);
    std::vector<float> x(4, 1.0f);
    w.add_tensor_bytes("x", GgmlType::F32, {4}, x.data());
    const std::string p = (test::scratch_dir() / name).string();
    w.write(p);
    return p;
  };
  for (uint32_t a : {0u, 3u, 48u, 1u << 21}) {
    const std::string p = with_alignment(fmt::format("align{}.gguf", a), Value::u32(a));
    EXPECT_EQ(open_error(p), fmt::format("{}: general.alignment is {}, expected a power of two up to 1 MiB", p, a));
  }
  const std::string p64 = with_alignment("align_u64.gguf", Value::u64(64));
  EXPECT_EQ(open_error(p64), p64 + ": general.alignment has type uint64, expected uint32");
  Writer w(64);
  std::vector<float> x(4, 2.0f);
  w.add_tensor_bytes("x", GgmlType::F32, {4}, x.data());
  const std::string ok = (test::scratch_dir() / "align64.gguf").string();
  w.write(ok);
  auto f = File::open(ok);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->tensor("x").file_offset % 64, 0u);
}

TEST(GgufCorrupt, NotARegularFile) {
  const std::string dir = (test::scratch_dir() / "a-directory.gguf").string();
  fs::create_directories(dir);
  EXPECT_EQ(open_error(dir), "'" + dir + "' is not a regular file");
  EXPECT_EQ(open_error(dir + "/missing.gguf"), "cannot open '" + dir + "/missing.gguf': No such file or directory");
}

namespace {

struct SplitSet {
  fs::path dir;
  std::vector<std::string> paths;
};

// Three parts, two F32 tensors each with distinct contents; `tweak(part, writer)` may break one.
SplitSet write_split(const std::string& name, const std::function<void(int, Writer&)>& tweak = {}) {
  SplitSet s;
  s.dir = test::scratch_dir() / name;
  fs::remove_all(s.dir);
  fs::create_directories(s.dir);
  static std::vector<std::vector<float>> data;
  data.clear();
  for (int t = 0; t < 6; ++t) data.push_back(iota_floats(16 + static_cast<size_t>(t) * 8, static_cast<float>(t) * 1000));
  for (int part = 0; part < 3; ++part) {
    Writer w;
    if (part == 0) w.set("general.architecture", Value::str("llama"));
    w.set("split.no", Value::u16(static_cast<uint16_t>(part)));
    w.set("split.count", Value::u16(3));
    w.set("split.tensors.count", Value::i32(6));
    for (int t = part * 2; t < part * 2 + 2; ++t)
      w.add_tensor_bytes(fmt::format("t{}", t), GgmlType::F32, {static_cast<int64_t>(data[t].size())}, data[t].data());
    if (tweak) tweak(part, w);
    s.paths.push_back((s.dir / fmt::format("m-{:05d}-of-00003.gguf", part + 1)).string());
    w.write(s.paths.back());
  }
  return s;
}

}  // namespace

TEST(GgufSplit, ThreePartsOpenAsOne) {
  SplitSet s = write_split("split-ok");
  auto f = File::open(s.paths[0]);
  EXPECT_EQ(f->n_parts(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  ASSERT_EQ(f->tensors().size(), 6u);
  for (int t = 0; t < 6; ++t) {
    const TensorInfo& ti = f->tensor(fmt::format("t{}", t));
    EXPECT_EQ(ti.file_index, static_cast<uint32_t>(t / 2));
    ASSERT_EQ(ti.ne[0], 16 + t * 8);
    const std::vector<float> expect = iota_floats(static_cast<size_t>(ti.ne[0]), static_cast<float>(t) * 1000);
    EXPECT_EQ(std::memcmp(ti.data, expect.data(), ti.nbytes), 0) << ti.name;
    EXPECT_EQ(f->part_path(ti.file_index), s.paths[static_cast<size_t>(t / 2)]);
  }
  EXPECT_EQ(f->total_size(), fs::file_size(s.paths[0]) + fs::file_size(s.paths[1]) + fs::file_size(s.paths[2]));
}

TEST(GgufSplit, BrokenSets) {
  SplitSet missing = write_split("split-missing");
  fs::remove(missing.paths[2]);
  EXPECT_EQ(open_error(missing.paths[0]), "cannot open '" + missing.paths[2] + "': No such file or directory");

  SplitSet no = write_split("split-no", [](int part, Writer& w) {
    if (part == 1) w.set("split.no", Value::u16(2));
  });
  EXPECT_EQ(open_error(no.paths[0]), no.paths[1] + ": expected split.no = 1 in this part");

  SplitSet count = write_split("split-count", [](int part, Writer& w) {
    if (part == 0) w.set("split.tensors.count", Value::i32(7));
  });
  EXPECT_EQ(open_error(count.paths[0]), count.paths[0] + ": split.tensors.count is 7 but the 3 parts hold 6 tensors");

  SplitSet other_count = write_split("split-other-count", [](int part, Writer& w) {
    if (part == 2) w.set("split.count", Value::u16(4));
  });
  EXPECT_EQ(open_error(other_count.paths[0]),
            other_count.paths[2] + ": split.count is 4 in this part but 3 in the first part");

  static const std::vector<float> extra(4, 0.5f);
  SplitSet dup = write_split("split-dup", [](int part, Writer& w) {
    if (part == 0) w.set("split.tensors.count", Value::i32(7));
    if (part == 2) w.add_tensor_bytes("t0", GgmlType::F32, {4}, extra.data());
  });
  EXPECT_EQ(open_error(dup.paths[0]), dup.paths[0] + ": tensor 't0' appears twice");

  SplitSet ok = write_split("split-names");
  EXPECT_EQ(open_error(ok.paths[1]),
            ok.paths[1] + ": split.no is 1, expected 0: open the first part (-00001-of-00003.gguf)");
  const std::string renamed = (ok.dir / "renamed.gguf").string();
  fs::copy_file(ok.paths[0], renamed);
  EXPECT_EQ(open_error(renamed), renamed + ": split.count is 3 but the name does not end in -00001-of-00003.gguf");
}
