// Line sources for `sluice chat`: LineEditor wraps libedit (line editing, persistent history)
// for a terminal; StreamLineReader reads plain lines when stdin is a pipe or a file.
#pragma once

#include <histedit.h>

#include <istream>
#include <string>

#include "chat/chat_repl.h"

namespace sluice::cli {

// libedit on stdin/stdout. Ctrl+C at the prompt is a key binding, not a signal: the terminal's
// ISIG is off while a line is edited, so ^C reaches the editor, which ends the read with
// kInterrupt (the typed text is dropped). While a reply is generated the terminal is back in its
// normal mode and ^C raises SIGINT as usual.
class LineEditor : public chat::LineReader {
 public:
  // history_path: file loaded now and rewritten after each entered line; empty: no history file.
  LineEditor(const char* program, std::string history_path);
  ~LineEditor() override;
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  chat::InputEvent read(const std::string& prompt) override;

 private:
  static char* prompt_fn(EditLine* el);
  static unsigned char interrupt_fn(EditLine* el, int ch);

  EditLine* el_ = nullptr;
  History* history_ = nullptr;
  std::string history_path_;
  std::string prompt_;
  bool interrupted_ = false;
  std::string interrupted_line_;
};

// Plain lines from a stream, no prompt, no editing.
class StreamLineReader : public chat::LineReader {
 public:
  explicit StreamLineReader(std::istream& in) : in_(in) {}
  chat::InputEvent read(const std::string& prompt) override;

 private:
  std::istream& in_;
};

// $XDG_CACHE_HOME/sluice/chat_history, else ~/.cache/sluice/chat_history; empty when neither
// variable is set. The directory is created.
std::string chat_history_path();

}  // namespace sluice::cli
