// KV prefixes on disk; see kv_disk.h.
#include "runtime/kv_disk.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "runtime/request.h"

namespace fs = std::filesystem;

namespace sluice {

namespace {
constexpr const char* kSuffix = ".slkv";

std::string name_for(const std::vector<int32_t>& tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens)
    for (int i = 0; i < 4; ++i) h = (h ^ ((static_cast<uint32_t>(t) >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return fmt::format("{:016x}-{}{}", h, tokens.size(), kSuffix);
}
}  // namespace

KvDisk::KvDisk(std::string dir, uint64_t max_bytes, std::string model_id, std::string kv_id)
    : dir_(std::move(dir)), max_bytes_(max_bytes), model_id_(std::move(model_id)), kv_id_(std::move(kv_id)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_)) fail("--kv-disk '{}' is not a directory{}", dir_, ec ? ": " + ec.message() : "");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.is_regular_file() && e.path().extension() == kSuffix) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    try {
      KvState st = read_kv_state(p.string());
      if (st.model_id != model_id_ || st.kv_id != kv_id_) continue;  // another model's: not ours to use or delete
      const uint64_t bytes = fs::file_size(p);
      entries_.push_back({p.string(), std::move(st.tokens), bytes, ++clock_});
      stats_.bytes += bytes;
    } catch (const Error& e) {
      SLUICE_LOG_WARN("warning: --kv-disk: skipping {}", e.what());
      ++stats_.skipped;
    }
  }
  evict();
}

std::optional<KvState> KvDisk::take(const std::vector<int32_t>& prompt, int than, int max_drop,
                                    int* common) {
  Entry* best = nullptr;
  int best_common = than;
  for (Entry& e : entries_) {
    const int c = reusable_prefix(e.tokens, prompt);
    if (c > best_common && static_cast<int64_t>(e.tokens.size()) - c <= max_drop)
      best = &e, best_common = c;
  }
  if (!best) {
    ++stats_.misses;
    return std::nullopt;
  }
  try {
    KvState st = read_kv_state(best->path);
    if (st.tokens != best->tokens || st.model_id != model_id_ || st.kv_id != kv_id_)
      fail("KV state '{}' changed on disk", best->path);
    best->used = ++clock_;
    ++stats_.hits;
    stats_.bytes_read += best->bytes;
    *common = best_common;
    return st;
  } catch (const Error& e) {
    SLUICE_LOG_WARN("warning: --kv-disk: skipping {}", e.what());
    ++stats_.skipped;
    ++stats_.misses;
    stats_.bytes -= best->bytes;
    entries_.erase(entries_.begin() + (best - entries_.data()));
    return std::nullopt;
  }
}

void KvDisk::put(const std::vector<int32_t>& tokens, std::vector<std::byte> kv) {
  if (static_cast<int>(tokens.size()) < kMinTokens || kv.empty()) return;
  for (Entry& e : entries_)
    if (e.tokens == tokens) {
      e.used = ++clock_;
      return;
    }
  KvState st;
  st.model_id = model_id_;
  st.kv_id = kv_id_;
  st.tokens = tokens;
  st.kv = std::move(kv);
  const std::string path = (fs::path(dir_) / name_for(tokens)).string();
  try {
    write_kv_state(path, st);
  } catch (const Error& e) {
    SLUICE_LOG_WARN("warning: --kv-disk: {}", e.what());
    return;
  }
  const uint64_t bytes = fs::file_size(path);
  entries_.push_back({path, tokens, bytes, ++clock_});
  stats_.bytes += bytes;
  stats_.bytes_written += bytes;
  evict();
}

void KvDisk::evict() {
  if (max_bytes_ == 0) return;
  while (stats_.bytes > max_bytes_ && !entries_.empty()) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
    std::error_code ec;
    fs::remove(oldest->path, ec);
    stats_.bytes -= oldest->bytes;
    entries_.erase(oldest);
  }
}

}  // namespace sluice
