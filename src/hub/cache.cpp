// The hub's cache layout (hub/cache.h).
#include "hub/cache.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sluice::hub {

namespace fs = std::filesystem;

RepoCache::RepoCache(const fs::path& cache_dir, const std::string& repo) {
  std::string name = "models--" + repo;
  for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', at)) name.replace(at, 1, "--");
  dir_ = cache_dir / name;
}

std::optional<std::string> RepoCache::ref(const std::string& name) const {
  std::ifstream in(dir_ / "refs" / name);
  std::string commit;
  if (!in || !std::getline(in, commit) || commit.empty()) return std::nullopt;
  return commit;
}

void RepoCache::set_ref(const std::string& commit, const std::string& name) const {
  fs::create_directories(dir_ / "refs");
  AtomicFile f((dir_ / "refs" / name).string());
  f.bytes(commit.data(), commit.size());
  f.close();
}

fs::path RepoCache::link(const std::string& commit, const std::string& path, const std::string& sha256) const {
  const fs::path at = snapshot(commit) / path;
  fs::create_directories(at.parent_path());
  fs::path target = "../../blobs/" + sha256;
  for (const auto& part : fs::path(path).parent_path()) {
    (void)part;
    target = ".." / target;
  }
  std::error_code ec;
  if (fs::is_symlink(at, ec) && fs::read_symlink(at, ec) == target) return at;
  fs::remove(at, ec);
  fs::create_symlink(target, at, ec);
  if (ec) fail("cannot link {} to its blob: {}", at.string(), ec.message());
  return at;
}

std::vector<RepoFile> RepoCache::snapshot_files() const {
  std::vector<RepoFile> out;
  const auto commit = ref();
  if (!commit || !fs::is_directory(snapshot(*commit))) return out;
  const fs::path root = snapshot(*commit);
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    std::error_code ec;
    if (!fs::is_regular_file(e.path(), ec)) continue;  // follows the link; a dangling one is skipped
    RepoFile f;
    f.path = e.path().lexically_relative(root).string();  // not relative(): it follows the link
    f.size = fs::file_size(e.path(), ec);
    if (fs::is_symlink(e.path())) f.sha256 = fs::read_symlink(e.path()).filename().string();
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  return out;
}

std::vector<CachedRepo> list_cache(const fs::path& cache_dir) {
  std::vector<CachedRepo> out;
  std::error_code ec;
  if (!fs::is_directory(cache_dir, ec)) return out;
  static const std::regex split(R"(-(\d{5})-of-\d{5}\.gguf$)", std::regex::icase);
  for (const auto& e : fs::directory_iterator(cache_dir)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("models--") || !e.is_directory()) continue;
    CachedRepo r;
    r.dir = e.path();
    r.repo = name.substr(8);
    if (const size_t at = r.repo.find("--"); at != std::string::npos) r.repo.replace(at, 2, "/");
    if (fs::is_directory(r.dir / "blobs"))
      for (const auto& b : fs::directory_iterator(r.dir / "blobs"))
        if (b.is_regular_file()) r.bytes += b.file_size();
    const RepoCache cache(cache_dir, r.repo);
    if (const auto commit = cache.ref()) r.snapshot = cache.snapshot(*commit);
    for (const RepoFile& f : cache.snapshot_files()) {
      std::string up = f.path;
      for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (!up.ends_with(".GGUF")) continue;
      std::smatch m;
      if (std::regex_search(f.path, m, split) && m[1] != "00001") {
        // A later part: its bytes count toward the first part's entry.
        const std::string first = f.path.substr(0, static_cast<size_t>(m.position(0))) + "-00001-of-" +
                                  f.path.substr(static_cast<size_t>(m.position(0)) + 10);
        for (auto& g : r.ggufs)
          if (g.path == first) g.size += f.size;
        continue;
      }
      r.ggufs.push_back(f);
    }
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo < b.repo; });
  return out;
}

}  // namespace sluice::hub
