// `run --session FILE` and `chat --session FILE`: what is restored from the file at start and
// whether the state is saved back at exit. One rule for both commands: a file that does not exist
// yet or was restored is saved at exit; a file that exists but was not restored (another model or
// KV type, a context too small for it) is left as it was unless --session-overwrite says otherwise,
// so a session saved with one model is not replaced by a run with another.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace sluice::cli {

class SessionFile {
 public:
  // Adds --session FILE (with `what` as its help text) and --session-overwrite to `app`.
  SessionFile(CLI::App& app, const std::string& what);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // Restores the file, when there is one, with `load` (which returns "" when it restored it, else
  // why not, and throws sluice::Error for a file that is not a valid state); says on stderr what
  // happened. Returns whether it was restored.
  bool restore(const std::function<std::string(const std::string&)>& load);
  bool restored() const { return restored_; }
  // Saves with `save` unless the file was not restored and may not be overwritten; says which.
  void save(const std::function<void(const std::string&)>& save) const;

 private:
  std::string path_;
  bool overwrite_ = false;
  bool restored_ = false;
  bool refused_ = false;  // the file exists and was not restored
};

}  // namespace sluice::cli
