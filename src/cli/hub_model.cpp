// -hf / --hf-file and URLs as models (cli/hub_model.h).
#include "cli/hub_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "hub/cache.h"
#include "hub/download.h"
#include "hub/hub.h"

namespace sluice::cli {

void add_hub_flags(CLI::App& app, HubFlags& h) {
  auto* repo = app.add_option("--hf-repo", h.repo, "(-hf) the model from the Hugging Face hub: ORG/NAME[:QUANT]");
  app.add_option("--hf-file", h.file, "(-hff) the repository's file to use instead of the quant tag")->needs(repo);
  for (const char* name : {"-m", "MODEL"})
    if (CLI::Option* o = app.get_option_no_throw(name)) repo->excludes(o);
}

std::string hub_model_path(const HubFlags& h, int connections) {
  const hub::HubConfig cfg = hub::HubConfig::from_env();
  hub::DownloadStats stats;
  const auto paths = hub::fetch_model(cfg, hub::RepoRef::parse(h.repo), h.file, &stats, connections);
  if (stats.downloaded > 0)
    SLUICE_LOG_INFO("downloaded {} in {:.1f} s ({}/s) into {}", format_bytes(stats.bytes), stats.seconds,
                    format_bytes(static_cast<uint64_t>(static_cast<double>(stats.bytes) / std::max(stats.seconds, 1e-3))),
                    cfg.cache_dir.string());
  return paths.front().string();
}

InspectedModel open_inspected(const std::string& path, const HubFlags& h) {
  InspectedModel m;
  std::string url = path;
  if (!h.repo.empty()) {
    const hub::HubConfig cfg = hub::HubConfig::from_env();
    const hub::RepoRef ref = hub::RepoRef::parse(h.repo);
    // A copy in the cache (refs/main's snapshot) is read locally; only a missing one remotely.
    const hub::RepoCache cache(cfg.cache_dir, ref.repo);
    if (const auto local = cache.snapshot_files(); !local.empty()) {
      try {
        const auto files = hub::select_gguf(local, ref, h.file);
        m.file = gguf::File::open((cache.snapshot(*cache.ref()) / files.front().path).string());
        return m;
      } catch (const Error&) {
        if (cfg.offline) throw;
      }
    }
    if (cfg.offline) fail("HF_HUB_OFFLINE is set and {} is not in the cache ({})", h.repo, cfg.cache_dir.string());
    m.client = std::make_shared<hub::HttpClient>(cfg.token);
    const auto files = hub::select_gguf(hub::list_files(*m.client, cfg, ref.repo), ref, h.file);
    url = hub::resolve_url(cfg, ref.repo, files.front().path);
  } else if (!hub::is_url(path)) {
    m.file = gguf::File::open(path);
    return m;
  } else {
    m.client = std::make_shared<hub::HttpClient>(hub::HubConfig::from_env().token);
  }
  m.remote = true;
  m.file = gguf::File::open(url, [client = m.client, fetched = m.fetched](const std::string& name) {
    return hub::open_remote(*client, name, *fetched);
  });
  return m;
}

}  // namespace sluice::cli
