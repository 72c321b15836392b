// Saved KV state files; see kv_state.h.
#include "runtime/kv_state.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sluice {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'K', 'V'};
constexpr uint64_t kMaxIdBytes = 1 << 28;

uint64_t fnv1a(const void* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// Appends to a byte buffer and hashes what it wrote.
struct Sink {
  std::vector<std::byte> out;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  template <typename T>
  void pod(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
};

class Source {
 public:
  Source(const std::vector<std::byte>& b, const std::string& what) : b_(b), what_(what) {}
  void bytes(void* dst, uint64_t n, const char* field) {
    if (b_.size() - at_ < n)
      fail("{}: truncated: the file ends inside {} ({} bytes needed at offset {}, {} left)", what_, field, n, at_,
           b_.size() - at_);
    std::memcpy(dst, b_.data() + at_, n);
    at_ += n;
  }
  template <typename T>
  T pod(const char* field) {
    T v;
    bytes(&v, sizeof v, field);
    return v;
  }
  // A count of elements of `size` bytes that must fit in what is left of the file.
  uint64_t count(uint64_t size, const char* field) {
    const uint64_t n = pod<uint64_t>(field);
    if (n > (b_.size() - at_) / size)
      fail("{}: truncated or damaged: {} says {} entries, only {} bytes are left", what_, field, n, b_.size() - at_);
    return n;
  }
  std::string str(const char* field) {
    const uint64_t n = count(1, field);
    if (n > kMaxIdBytes) fail("{}: {} of {} bytes is not a sluice KV state", what_, field, n);
    std::string s(n, '\0');
    bytes(s.data(), n, field);
    return s;
  }
  uint64_t at() const { return at_; }

 private:
  const std::vector<std::byte>& b_;
  const std::string& what_;
  uint64_t at_ = 0;
};

}  // namespace

std::string model_fingerprint(const gguf::File& file) {
  uint64_t h = fnv1a(nullptr, 0);
  const uint64_t size = file.total_size();
  h = fnv1a(&size, sizeof size, h);
  for (const auto& t : file.tensors()) {
    h = fnv1a(t.name.data(), t.name.size(), h);
    h = fnv1a(&t.type, sizeof t.type, h);
    h = fnv1a(t.ne.data(), sizeof(int64_t) * t.ne.size(), h);
    h = fnv1a(&t.file_offset, sizeof t.file_offset, h);
    h = fnv1a(t.data, std::min<uint64_t>(t.nbytes, 64), h);
  }
  return fmt::format("{} {} bytes #{:016x}", file.get_string_or("general.architecture", "?"), size, h);
}

void write_kv_state(const std::string& path, const KvState& st) {
  Sink s;
  s.bytes(kMagic, sizeof kMagic);
  s.pod<uint32_t>(kKvStateVersion);
  s.pod<uint32_t>(0);
  s.str(st.model_id);
  s.str(st.kv_id);
  s.str(st.app_data);
  s.pod<uint64_t>(st.tokens.size());
  s.bytes(st.tokens.data(), sizeof(int32_t) * st.tokens.size());
  s.pod<uint64_t>(st.logits.size());
  s.bytes(st.logits.data(), sizeof(float) * st.logits.size());
  s.pod<uint64_t>(st.kv.size());
  s.bytes(st.kv.data(), st.kv.size());
  const uint64_t sum = fnv1a(s.out.data(), s.out.size());
  AtomicFile f(path);
  f.bytes(s.out.data(), s.out.size());
  f.pod(sum);
  f.close();
}

KvState parse_kv_state(const std::vector<std::byte>& bytes, const std::string& what) {
  Source in(bytes, what);
  char magic[8];
  in.bytes(magic, sizeof magic, "the magic");
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) fail("{}: not a sluice KV state file (no SLUICEKV magic)", what);
  const auto version = in.pod<uint32_t>("the version");
  if (version != kKvStateVersion) fail("{}: KV state version {}, this build reads version {}", what, version, kKvStateVersion);
  in.pod<uint32_t>("the header");
  KvState st;
  st.model_id = in.str("the model id");
  st.kv_id = in.str("the KV layout id");
  st.app_data = in.str("the application data");
  st.tokens.resize(in.count(sizeof(int32_t), "the token count"));
  in.bytes(st.tokens.data(), sizeof(int32_t) * st.tokens.size(), "the tokens");
  st.logits.resize(in.count(sizeof(float), "the logit count"));
  in.bytes(st.logits.data(), sizeof(float) * st.logits.size(), "the logits");
  st.kv.resize(in.count(1, "the KV byte count"));
  in.bytes(st.kv.data(), st.kv.size(), "the KV rows");
  const uint64_t body = in.at();
  const auto sum = in.pod<uint64_t>("the checksum");
  if (in.at() != bytes.size()) fail("{}: {} unexpected bytes after the checksum", what, bytes.size() - in.at());
  if (sum != fnv1a(bytes.data(), body)) fail("{}: damaged: the checksum does not match the contents", what);
  return st;
}

KvState read_kv_state(const std::string& path) {
  // An ifstream opens a directory, and its size reads as 2^63 - 1.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("KV state '{}' is a directory", path);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail("cannot open KV state '{}'", path);
  const std::streamoff size = f.tellg();
  if (size < 0) fail("cannot read KV state '{}'", path);
  std::vector<std::byte> bytes(static_cast<size_t>(std::max<std::streamoff>(0, size)));
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(bytes.data()), size)) fail("cannot read KV state '{}'", path);
  return parse_kv_state(bytes, "KV state '" + path + "'");
}

}  // namespace sluice
