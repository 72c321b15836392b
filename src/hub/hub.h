// The Hugging Face hub as sluice uses it: its environment (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE,
// HF_HUB_CACHE / HF_HOME), a repository's file listing, and the choice of a GGUF by quant tag
// (`org/name:Q4_K_M`, case-insensitive, every part of a split model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/http.h"

namespace sluice::hub {

struct HubConfig {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, no trailing slash
  std::string token;                                // HF_TOKEN
  bool offline = false;                             // HF_HUB_OFFLINE=1
  std::filesystem::path cache_dir;  // HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
  static HubConfig from_env();
};

// "org/name:QUANT" (the tag optional). Throws sluice::Error on a malformed name.
struct RepoRef {
  std::string repo;
  std::string quant;
  static RepoRef parse(const std::string& text);
};

struct RepoFile {
  std::string path;    // inside the repository
  uint64_t size = 0;
  std::string sha256;  // the LFS object id (empty for a file not in LFS)
};

// The repository's files (the hub's tree API, recursive, at `revision`).
std::vector<RepoFile> list_files(HttpClient& client, const HubConfig& cfg, const std::string& repo,
                                 const std::string& revision = "main");

// The quant tag of a GGUF file name ("Qwen3-30B-A3B-Q4_K_M-00001-of-00002.gguf" → "Q4_K_M"), "" if none.
std::string quant_of(const std::string& path);

// The files to fetch, first part first: `file` when given (and its split siblings), else the GGUFs
// whose quant tag is `quant`. Without a tag a repository with one quant gives it; with several the
// error lists them, as does a tag the repository lacks. Multimodal projectors are never chosen.
std::vector<RepoFile> select_gguf(const std::vector<RepoFile>& files, const RepoRef& ref, const std::string& file);

// {endpoint}/{repo}/resolve/{revision}/{path}
std::string resolve_url(const HubConfig& cfg, const std::string& repo, const std::string& path,
                        const std::string& revision = "main");

}  // namespace sluice::hub
