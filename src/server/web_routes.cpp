// The web page and the engine's live state:
//  - GET / and GET /web/<file>: the chat page (src/server/web), embedded into the binary at build
//    time (web_assets.h); served without the API key (it holds no data; the page asks for the key
//    and sends it with its API calls) and with a Content-Security-Policy that lets only the page's
//    own scripts run, so HTML in model output that got past the page's sanitiser still runs nothing;
//  - GET /engine: the engine as it runs, as one JSON object (README, "The web page"): the
//    scheduler's counters, slots and queue, the expert store's counters and the expert cache map
//    (every layer's experts: on disk, loading, resident or prefetched, with per-expert counts).
//    Counters are totals since start; the page turns the differences between two polls into rates.
#include <fmt/format.h>

#include <chrono>
#include <string>

#include "routes.h"
#include "web_assets.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void send_asset(const WebAsset& a, httplib::Response& res) {
  res.set_content(reinterpret_cast<const char*>(a.data), a.size, a.content_type);
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
}

// One character per expert of a layer: d on disk, l loading, r resident, p prefetched (not yet
// used), - no routed experts here.
std::string layer_states(const ExpertCacheMap& m, int il) {
  static constexpr char kCode[] = {'d', 'l', 'r', 'p', '-'};
  std::string s(m.n_expert, '-');
  for (int e = 0; e < m.n_expert; ++e) {
    const uint8_t st = m.state[static_cast<size_t>(il) * m.n_expert + e];
    s[e] = st < sizeof kCode ? kCode[st] : '?';
  }
  return s;
}

json per_layer(const std::vector<uint32_t>& v, const ExpertCacheMap& m) {
  json rows = json::array();
  for (int il = 0; il < m.n_layer; ++il)
    rows.push_back(std::vector<uint32_t>(v.begin() + static_cast<ptrdiff_t>(il) * m.n_expert,
                                         v.begin() + static_cast<ptrdiff_t>(il + 1) * m.n_expert));
  return rows;
}

json engine_json(Routes& routes, std::chrono::steady_clock::time_point started) {
  const SchedulerStats s = routes.scheduler().stats();
  const ModelInfo& info = routes.engine().info();
  const std::shared_ptr<const ExpertCacheMap> map = routes.scheduler().expert_cache();
  json slots = json::array();
  for (const SlotStats& sl : s.slots)
    slots.push_back({{"id", sl.id}, {"busy", sl.busy}, {"n_ctx", sl.n_ctx}, {"n_cached", sl.n_cached},
                     {"n_prompt", sl.n_prompt}, {"n_reused", sl.n_reused}});
  json cache = {{"n_layer", 0}, {"n_expert", 0}, {"state", json::array()}, {"hits", json::array()},
                {"misses", json::array()}, {"prefetches", json::array()}};
  if (map && map->n_layer > 0) {
    cache["n_layer"] = map->n_layer;
    cache["n_expert"] = map->n_expert;
    for (int il = 0; il < map->n_layer; ++il) cache["state"].push_back(layer_states(*map, il));
    cache["hits"] = per_layer(map->hits, *map);
    cache["misses"] = per_layer(map->misses, *map);
    cache["prefetches"] = per_layer(map->prefetches, *map);
  }
  return {
      {"object", "sluice.engine"},
      {"uptime_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()},
      {"model",
       {{"id", routes.options().model_name},
        {"architecture", info.architecture},
        {"n_layer", info.n_layer},
        {"n_expert", info.n_expert},
        {"n_expert_used", info.n_expert_used},
        {"experts_mode", info.experts_mode},
        {"experts_detail", info.experts_detail}}},
      {"scheduler",
       {{"requests", s.requests},
        {"completed", s.completed},
        {"cancelled", s.cancelled},
        {"failed", s.failed},
        {"prompt_tokens", s.prompt_tokens},
        {"reused_tokens", s.reused_tokens},
        {"generated_tokens", s.generated_tokens},
        {"steps", s.steps},
        {"busy_seconds", s.busy_seconds},
        {"queue_depth", s.queue_depth},
        {"active", s.active},
        {"last_batch_rows", s.last_batch_rows},
        {"last_batch_sequences", s.last_batch_sequences}}},
      {"slots", slots},
      {"experts",
       {{"requests", s.experts.requests},
        {"hits", s.experts.hits},
        {"misses", s.experts.misses},
        {"bytes_read", s.experts.bytes_read},
        {"read_seconds", s.experts.read_seconds},
        {"stall_seconds", s.experts.stall_seconds},
        {"prefetch_issued", s.experts.prefetch_issued},
        {"prefetch_used", s.experts.prefetch_used},
        {"cache_bytes", s.experts.cache_bytes}}},
      {"cache", cache}};
}

}  // namespace

bool is_web_asset_path(const std::string& path) { return path == "/" || path.rfind("/web/", 0) == 0; }

void add_web_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods) {
  const auto started = std::chrono::steady_clock::now();
  for (const WebAsset& a : web_assets()) {
    methods[a.path] = "GET";
    svr.Get(a.path, routed([&a](const httplib::Request&, httplib::Response& res) { send_asset(a, res); }));
    if (std::string(a.path) == "/web/index.html") {
      methods["/"] = "GET";
      svr.Get("/", routed([&a](const httplib::Request&, httplib::Response& res) { send_asset(a, res); }));
    }
  }
  methods["/engine"] = "GET";
  svr.Get("/engine", routed([&routes, started](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_text(engine_json(routes, started)), "application/json");
    res.set_header("Cache-Control", "no-store");
  }));
}

}  // namespace sluice::server
