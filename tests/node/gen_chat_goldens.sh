#!/bin/sh
# Regenerates tests/data/chat/golden/ from @huggingface/jinja: for every chat template in the
# shared test data and every conversation in tests/data/chat/conversations, writes
# TEMPLATE__CONVERSATION.txt (the rendered prompt) or, when the reference raises,
# TEMPLATE__CONVERSATION.error (its message). Needs node and `npm ci` in tests/node.
# The clock is pinned (NOW) so that templates calling strftime_now() render the same date
# as the C++ test, which uses the same value.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
templates=${SLUICE_TESTDATA:-$root/../shared/testdata}/chat-templates
conversations=$root/tests/data/chat/conversations
golden=$root/tests/data/chat/golden
NOW=1750000000

rm -f "$golden"/*.txt "$golden"/*.error
mkdir -p "$golden"
for t in "$templates"/*.jinja; do
  tname=$(basename "$t" .jinja)
  for c in "$conversations"/*.json; do
    cname=$(basename "$c" .json)
    out="$golden/${tname}__${cname}"
    if node "$here/render_jinja.mjs" "$t" "$c" --now "$NOW" > "$out.txt" 2> "$out.err.tmp"; then
      rm -f "$out.err.tmp"
    else
      rm -f "$out.txt"
      mv "$out.err.tmp" "$out.error"
    fi
  done
done
echo "rendered: $(ls "$golden"/*.txt 2>/dev/null | wc -l), raised: $(ls "$golden"/*.error 2>/dev/null | wc -l)"
