// The Hugging Face cache layout, shared with the hub's own tools so that a file one of them
// downloaded is found by the other: under the cache directory each repository has
//   models--ORG--NAME/blobs/SHA256        the files, named by their LFS id (.incomplete while partial)
//   models--ORG--NAME/snapshots/COMMIT/PATH  relative symlinks to the blobs
//   models--ORG--NAME/refs/main           the commit `main` pointed to at the last download
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hub/hub.h"

namespace sluice::hub {

class RepoCache {
 public:
  RepoCache(const std::filesystem::path& cache_dir, const std::string& repo);
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path blob(const std::string& sha256) const { return dir_ / "blobs" / sha256; }
  std::filesystem::path snapshot(const std::string& commit) const { return dir_ / "snapshots" / commit; }
  // The commit refs/NAME holds, if any.
  std::optional<std::string> ref(const std::string& name = "main") const;
  void set_ref(const std::string& commit, const std::string& name = "main") const;
  // snapshots/COMMIT/PATH → ../../blobs/SHA (relative, as the hub's tools make it); returns the link.
  std::filesystem::path link(const std::string& commit, const std::string& path, const std::string& sha256) const;
  // The files of the snapshot refs/main names (size of the blob each links to); empty when none.
  std::vector<RepoFile> snapshot_files() const;

 private:
  std::filesystem::path dir_;
};

// A repository in the cache: its name, bytes on disk (blobs) and its GGUFs under refs/main.
struct CachedRepo {
  std::string repo;
  std::filesystem::path dir;
  uint64_t bytes = 0;
  std::vector<RepoFile> ggufs;  // snapshot paths, first parts of split models with their total size
  std::filesystem::path snapshot;
};
std::vector<CachedRepo> list_cache(const std::filesystem::path& cache_dir);

}  // namespace sluice::hub
