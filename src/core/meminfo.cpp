// Memory detection from /proc and /sys/fs/cgroup. Everything is best effort: containers hide or
// remount these files in many ways, so each source is optional and the caller combines what exists.
#include "core/meminfo.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace sluice {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  s = trim(s);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "Key:   12345 kB" → bytes; nullopt when the line is not of that form or would overflow.
std::optional<uint64_t> parse_kb_field(std::string_view rest) {
  rest = trim(rest);
  if (rest.size() < 3 || rest.substr(rest.size() - 2) != "kB") return std::nullopt;
  auto kb = parse_u64(rest.substr(0, rest.size() - 2));
  if (!kb || *kb > (UINT64_MAX >> 10)) return std::nullopt;
  return *kb << 10;
}

template <typename Fn>
void for_each_line(std::string_view text, Fn fn) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    fn(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

std::optional<std::string> slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return ss.str();
}

std::optional<uint64_t> read_value(const std::filesystem::path& p) {
  auto text = slurp(p);
  return text ? parse_cgroup_value(*text) : std::nullopt;
}

// Checks every level from `mount` down to `mount/rel` and keeps the one with the least headroom,
// since a parent's limit binds its children too. Levels that are not visible under the mount
// (cgroup namespaces, "/.." paths) are simply absent and contribute nothing.
bool find_binding_limit(const std::filesystem::path& mount, const std::string& rel,
                        const char* limit_file, const char* usage_file, MemInfo& out) {
  std::vector<std::string> parts;
  for (const auto& comp : std::filesystem::path(rel).relative_path()) {
    const std::string c = comp.string();
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(c);
  }
  bool found = false;
  uint64_t best_headroom = 0;
  std::filesystem::path dir = mount;
  for (size_t level = 0; level <= parts.size(); ++level) {
    if (level > 0) dir /= parts[level - 1];
    auto limit = read_value(dir / limit_file);
    if (!limit) continue;
    auto usage = read_value(dir / usage_file);
    uint64_t used = usage.value_or(0);
    uint64_t headroom = used < *limit ? *limit - used : 0;
    if (!found || headroom < best_headroom) {
      found = true;
      best_headroom = headroom;
      out.cgroup_limit = limit;
      out.cgroup_usage = usage;
    }
  }
  return found;
}

// CAP_IPC_LOCK (bit 14 of the effective set, e.g. root) lifts RLIMIT_MEMLOCK for mlock.
bool status_has_cap_ipc_lock(std::string_view proc_self_status) {
  bool has = false;
  for_each_line(proc_self_status, [&](std::string_view line) {
    if (!line.starts_with("CapEff:")) return;
    const std::string_view hex = trim(line.substr(7));
    uint64_t caps = 0;
    if (std::from_chars(hex.data(), hex.data() + hex.size(), caps, 16).ec == std::errc()) has = (caps >> 14) & 1;
  });
  return has;
}

}  // namespace

std::optional<uint64_t> MemInfo::available_bytes() const {
  std::optional<uint64_t> best;
  if (cgroup_limit) {
    uint64_t usage = cgroup_usage.value_or(0);
    best = usage < *cgroup_limit ? *cgroup_limit - usage : 0;
  }
  if (mem_available) best = best ? std::min(*best, *mem_available) : *mem_available;
  return best;
}

void parse_proc_meminfo(std::string_view text, MemInfo& out) {
  for_each_line(text, [&](std::string_view line) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return;
    std::string_view key = line.substr(0, colon);
    if (key == "MemTotal") out.mem_total = parse_kb_field(line.substr(colon + 1));
    else if (key == "MemAvailable") out.mem_available = parse_kb_field(line.substr(colon + 1));
  });
}

std::optional<uint64_t> parse_status_rss(std::string_view proc_self_status) {
  std::optional<uint64_t> rss;
  for_each_line(proc_self_status, [&](std::string_view line) {
    if (line.starts_with("VmRSS:")) rss = parse_kb_field(line.substr(6));
  });
  return rss;
}

std::optional<uint64_t> parse_cgroup_value(std::string_view text) {
  text = trim(text);
  if (text == "max") return std::nullopt;
  auto v = parse_u64(text);
  // v1 reports "no limit" as PAGE_COUNTER_MAX rounded to the page size, which differs by kernel
  // and page size; every such value lies far above any real memory size.
  if (!v || *v >= (uint64_t{1} << 62)) return std::nullopt;
  return v;
}

CgroupPaths parse_proc_self_cgroup(std::string_view text) {
  CgroupPaths out;
  for_each_line(text, [&](std::string_view line) {
    // hierarchy-ID:controller-list:path; the path may itself contain ':'.
    size_t a = line.find(':');
    if (a == std::string_view::npos) return;
    size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) return;
    std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    std::string path(trim(line.substr(b + 1)));
    if (id == "0" && controllers.empty()) {
      out.v2 = path;
      return;
    }
    while (!controllers.empty()) {
      size_t comma = controllers.find(',');
      if (controllers.substr(0, comma) == "memory") {
        out.v1 = path;
        return;
      }
      if (comma == std::string_view::npos) break;
      controllers.remove_prefix(comma + 1);
    }
  });
  return out;
}

MemInfo read_meminfo_at(const std::string& root) {
  namespace fs = std::filesystem;
  MemInfo m;
  const fs::path base = root.empty() ? fs::path("/") : fs::path(root);
  if (auto t = slurp(base / "proc/meminfo")) parse_proc_meminfo(*t, m);
  bool cap_ipc_lock = false;
  if (auto t = slurp(base / "proc/self/status")) {
    m.rss = parse_status_rss(*t);
    cap_ipc_lock = status_has_cap_ipc_lock(*t);
  }

  CgroupPaths paths;
  if (auto t = slurp(base / "proc/self/cgroup")) paths = parse_proc_self_cgroup(*t);
  const fs::path cg = base / "sys/fs/cgroup";
  std::error_code ec;
  // Pure v2 mounts the unified hierarchy at /sys/fs/cgroup; hybrid setups at .../unified.
  if (paths.v2) {
    for (const fs::path& mount : {cg, cg / "unified"}) {
      if (!fs::exists(mount / "cgroup.controllers", ec)) continue;
      if (find_binding_limit(mount, *paths.v2, "memory.max", "memory.current", m)) {
        m.cgroup_version = 2;
        break;
      }
    }
  }
  if (m.cgroup_version == 0 && paths.v1 &&
      find_binding_limit(cg / "memory", *paths.v1, "memory.limit_in_bytes", "memory.usage_in_bytes", m))
    m.cgroup_version = 1;

  rlimit rl{};
  if (!cap_ipc_lock && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    m.memlock_limit = static_cast<uint64_t>(rl.rlim_cur);
  return m;
}

MemInfo read_meminfo() { return read_meminfo_at(""); }

}  // namespace sluice
