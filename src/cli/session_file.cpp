// The --session restore/save rule of run and chat; see session_file.h.
#include "cli/session_file.h"

#include <filesystem>

#include "core/error.h"
#include "core/log.h"

namespace sluice::cli {

SessionFile::SessionFile(CLI::App& app, const std::string& what) {
  app.add_option("--session", path_, what)->type_name("FILE");
  app.add_flag(
      "--session-overwrite", overwrite_,
      "save to the --session file at exit even when it held a state that could not be restored "
      "(another model or KV type)");
}

bool SessionFile::restore(const std::function<std::string(const std::string&)>& load) {
  if (path_.empty()) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path_, ec)) {
    // Said now rather than when the state is saved at exit, after the work it holds is done.
    const fs::path dir = fs::path(path_).parent_path();
    if (!dir.empty() && !fs::is_directory(dir, ec))
      fail("--session '{}': '{}' is not a directory", path_, dir.string());
    SLUICE_LOG_INFO("session: '{}' does not exist yet; starting fresh", path_);
    return false;
  }
  const std::string why = load(path_);
  restored_ = why.empty();
  refused_ = !restored_;
  if (refused_)
    SLUICE_LOG_WARN("session: not restored: {}; starting fresh, and '{}' is {} at exit", why, path_,
                    overwrite_ ? "replaced (--session-overwrite)"
                               : "left as it is (--session-overwrite replaces it)");
  return restored_;
}

void SessionFile::save(const std::function<void(const std::string&)>& save) const {
  if (path_.empty()) return;
  if (refused_ && !overwrite_) {
    SLUICE_LOG_WARN(
        "session: not saved: '{}' holds a state this session could not restore "
        "(--session-overwrite "
        "replaces it)",
        path_);
    return;
  }
  save(path_);
}

}  // namespace sluice::cli
