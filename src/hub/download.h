// Getting a hub model into the cache (hub/cache.h) once: each file is fetched over several
// connections into blobs/SHA.incomplete (a cut connection is resumed with Range, and an
// interrupted download resumes from the ranges recorded beside it), checked against the hub's
// sha256 (its LFS id, X-Linked-Etag) and only then renamed into place and linked from the
// snapshot. The disk's free space is checked against the announced sizes before any byte is
// fetched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/hub.h"

namespace sluice::hub {

struct DownloadStats {
  uint64_t bytes = 0;   // fetched now (not what was already there)
  double seconds = 0;   // spent fetching them
  int downloaded = 0;   // files fetched (in whole or in part)
  int cached = 0;       // files found in the cache
};

// The local paths (snapshot links) of the GGUF `ref` names (or `file`), first part first. With
// HF_HUB_OFFLINE only the cache is read. Throws sluice::Error.
std::vector<std::filesystem::path> fetch_model(const HubConfig& cfg, const RepoRef& ref, const std::string& file,
                                               DownloadStats* stats = nullptr, int connections = 4);

// The file's sha256 in lower-case hex.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace sluice::hub
