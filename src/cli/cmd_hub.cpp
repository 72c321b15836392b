// `sluice pull ORG/NAME[:QUANT]`, `sluice list` and `sluice rm ORG/NAME[:QUANT]`: the models in
// the Hugging Face cache (hub/cache.h), which the hub's own tools share. pull downloads what is
// missing (hub/download.h); list gives each cached GGUF's size, quant and the RAM verdict for this
// machine (the same analysis as inspect); rm deletes a repository or one quant of it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

#include "cli/commands.h"
#include "cli/hub_model.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "gguf/gguf.h"
#include "hub/cache.h"
#include "hub/download.h"
#include "hub/hub.h"
#include "plan/sizing.h"

namespace sluice::cli {

namespace fs = std::filesystem;

int cmd_pull(int argc, char** argv) {
  CLI::App app{"Download a GGUF from the Hugging Face hub into its cache (HF_HUB_CACHE / HF_HOME)", "sluice pull"};
  HubFlags h;
  int connections = 4;
  app.add_option("REPO", h.repo, "ORG/NAME[:QUANT]")->required();
  app.add_option("--hf-file", h.file, "(-hff) the repository's file to use instead of the quant tag");
  app.add_option("-j,--connections", connections, "connections per file")->check(CLI::Range(1, 32))->capture_default_str();
  add_quiet_flag(app);
  SLUICE_PARSE(app, argc, argv);
  const hub::HubConfig cfg = hub::HubConfig::from_env();
  hub::DownloadStats stats;
  const auto paths = hub::fetch_model(cfg, hub::RepoRef::parse(h.repo), h.file, &stats, connections);
  for (const auto& p : paths) fmt::print("{}\n", p.string());
  if (stats.downloaded == 0) {
    SLUICE_LOG_INFO("already in the cache ({} file(s))", stats.cached);
  } else {
    SLUICE_LOG_INFO("downloaded {} ({} B) in {:.2f} s: {}/s", format_bytes(stats.bytes), stats.bytes, stats.seconds,
                    format_bytes(static_cast<uint64_t>(static_cast<double>(stats.bytes) / std::max(stats.seconds, 1e-3))));
  }
  return 0;
}

int cmd_list(int argc, char** argv) {
  CLI::App app{"List the GGUF models in the Hugging Face cache with size, quant and RAM verdict", "sluice list"};
  std::string ram_text;
  bool json = false;
  app.add_option("--ram", ram_text, "RAM to judge against (default: memory available now)")->check(byte_size());
  app.add_flag("--json", json, "print JSON");
  SLUICE_PARSE(app, argc, argv);
  SizingOptions opts;
  if (!ram_text.empty()) opts.ram = parse_byte_size(ram_text, "--ram");
  const hub::HubConfig cfg = hub::HubConfig::from_env();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!json) fmt::print("{:<40} {:<10} {:>10}  {}\n", "model", "quant", "size", "verdict");
  for (const hub::CachedRepo& r : hub::list_cache(cfg.cache_dir)) {
    for (const hub::RepoFile& f : r.ggufs) {
      std::string verdict, quant = hub::quant_of(f.path), name = r.repo + (quant.empty() ? "" : ":" + quant);
      try {
        const auto file = gguf::File::open((r.snapshot / f.path).string());
        verdict = analyze_model(*file, opts).verdict.message;
      } catch (const Error& e) {
        verdict = fmt::format("unreadable: {}", e.what());
      }
      if (json)
        out.push_back({{"model", name}, {"repo", r.repo}, {"file", f.path}, {"quant", quant}, {"bytes", f.size},
                       {"path", (r.snapshot / f.path).string()}, {"verdict", verdict}});
      else
        fmt::print("{:<40} {:<10} {:>10}  {}\n", name, quant.empty() ? "-" : quant, format_bytes(f.size), verdict);
    }
  }
  if (json) fmt::print("{}\n", out.dump(2));
  return 0;
}

int cmd_rm(int argc, char** argv) {
  CLI::App app{"Delete a model (a repository, or one quant of it) from the Hugging Face cache", "sluice rm"};
  HubFlags h;
  app.add_option("REPO", h.repo, "ORG/NAME[:QUANT] (without a quant: the whole repository)")->required();
  app.add_option("--hf-file", h.file, "(-hff) only this file of the repository (and its split parts)");
  SLUICE_PARSE(app, argc, argv);
  const hub::HubConfig cfg = hub::HubConfig::from_env();
  const hub::RepoRef ref = hub::RepoRef::parse(h.repo);
  const hub::RepoCache cache(cfg.cache_dir, ref.repo);
  if (!fs::is_directory(cache.dir())) fail("{} is not in the cache ({})", ref.repo, cfg.cache_dir.string());
  if (ref.quant.empty() && h.file.empty()) {
    const uintmax_t n = fs::remove_all(cache.dir());
    fmt::print("removed {} ({} entries)\n", cache.dir().string(), n);
    return 0;
  }
  const auto files = hub::select_gguf(cache.snapshot_files(), ref, h.file);
  const fs::path snap = cache.snapshot(*cache.ref());
  std::set<fs::path> blobs;
  for (const hub::RepoFile& f : files) {
    const fs::path link = snap / f.path;
    if (fs::is_symlink(link)) blobs.insert(fs::weakly_canonical(link.parent_path() / fs::read_symlink(link)));
    fs::remove(link);
    fmt::print("removed {}\n", link.string());
  }
  // A blob goes once no snapshot links to it any more.
  for (const auto& e : fs::recursive_directory_iterator(cache.dir() / "snapshots"))
    if (e.is_symlink()) blobs.erase(fs::weakly_canonical(e.path().parent_path() / fs::read_symlink(e.path())));
  for (const auto& b : blobs) {
    fs::remove(b);
    fmt::print("removed {}\n", b.string());
  }
  return 0;
}

}  // namespace sluice::cli
