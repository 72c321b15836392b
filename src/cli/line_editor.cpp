// libedit and plain-stream line sources for `sluice chat` (see line_editor.h).
#include "cli/line_editor.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <termios.h>
#include <unistd.h>

namespace sluice::cli {

LineEditor::LineEditor(const char* program, std::string history_path) : history_path_(std::move(history_path)) {
  el_ = el_init(program, stdin, stdout, stderr);
  if (!el_) return;  // read() then falls back to plain lines
  HistEvent ev;
  history_ = history_init();
  history(history_, &ev, H_SETSIZE, 1000);
  history(history_, &ev, H_SETUNIQUE, 1);
  if (!history_path_.empty()) history(history_, &ev, H_LOAD, history_path_.c_str());
  el_set(el_, EL_CLIENTDATA, this);
  el_set(el_, EL_PROMPT, &LineEditor::prompt_fn);
  el_set(el_, EL_EDITOR, "emacs");
  el_set(el_, EL_HIST, history, history_);
  el_set(el_, EL_SIGNAL, 1);  // restore the terminal on fatal signals and window changes
  // Edit mode without ISIG, so ^C arrives as a key bound to interrupt_fn.
  el_set(el_, EL_SETTY, "-d", "-isig", static_cast<char*>(nullptr));
  // The wide call: the narrow el_set(EL_ADDFN) copies both strings and never frees them.
  el_wset(el_, EL_ADDFN, L"sluice-interrupt", L"drop the line (Ctrl+C)", &LineEditor::interrupt_fn);
  el_set(el_, EL_BIND, "^C", "sluice-interrupt", static_cast<char*>(nullptr));
  el_source(el_, nullptr);  // the user's ~/.editrc
}

LineEditor::~LineEditor() {
  if (el_) el_end(el_);
  if (history_) history_end(history_);
}

char* LineEditor::prompt_fn(EditLine* el) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  return static_cast<LineEditor*>(self)->prompt_.data();
}

unsigned char LineEditor::interrupt_fn(EditLine* el, int) {
  void* p = nullptr;
  el_get(el, EL_CLIENTDATA, &p);
  auto* self = static_cast<LineEditor*>(p);
  const LineInfo* li = el_line(el);
  self->interrupted_ = true;
  self->interrupted_line_.assign(li->buffer, li->lastchar);
  return CC_NEWLINE;  // ends el_gets; read() discards the line
}

chat::InputEvent LineEditor::read(const std::string& prompt) {
  if (!el_) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
    StreamLineReader plain(std::cin);
    return plain.read(prompt);
  }
  prompt_ = prompt;
  interrupted_ = false;
  // This libedit prints the prompt before it switches the terminal to edit mode, so keys typed
  // right after the prompt appears could still be echoed by the terminal, and ^C / ^D taken by
  // the line discipline (a lost SIGINT, a lost EOF). Leaving cooked mode first closes that window;
  // the cooked settings come back after the line so ^C during a reply raises SIGINT.
  termios cooked{};
  const bool tty = tcgetattr(STDIN_FILENO, &cooked) == 0;
  if (tty) {
    termios edit = cooked;
    edit.c_lflag &= ~static_cast<tcflag_t>(ISIG | ICANON | ECHO);
    tcsetattr(STDIN_FILENO, TCSANOW, &edit);
  }
  int count = 0;
  const char* got = el_gets(el_, &count);
  if (tty) tcsetattr(STDIN_FILENO, TCSANOW, &cooked);
  if (interrupted_) {
    std::fputs("^C\n", stdout);  // the editor left the cursor on the dropped line
    std::fflush(stdout);
    return {chat::InputEvent::kInterrupt, interrupted_line_};
  }
  if (!got || count <= 0) {
    std::fputc('\n', stdout);  // leave the prompt line on Ctrl+D
    std::fflush(stdout);
    return {chat::InputEvent::kEof, ""};
  }
  std::string line(got, static_cast<size_t>(count));
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.find_first_not_of(" \t") != std::string::npos) {
    HistEvent ev;
    history(history_, &ev, H_ENTER, line.c_str());
    // Saved after every line so a killed session keeps its history.
    if (!history_path_.empty()) history(history_, &ev, H_SAVE, history_path_.c_str());
  }
  return {chat::InputEvent::kLine, line};
}

chat::InputEvent StreamLineReader::read(const std::string&) {
  std::string line;
  if (!std::getline(in_, line)) return {chat::InputEvent::kEof, ""};
  return {chat::InputEvent::kLine, line};
}

std::string chat_history_path() {
  std::filesystem::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::filesystem::path(h) / ".cache";
  else return "";
  dir /= "sluice";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "";  // no history rather than no chat
  return (dir / "chat_history").string();
}

}  // namespace sluice::cli
