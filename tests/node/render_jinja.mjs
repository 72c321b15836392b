// Reference renderer for chat-template tests: renders TEMPLATE with the JSON object in CONTEXT
// using @huggingface/jinja (the implementation sluice must match byte for byte) and writes the
// result to stdout unchanged. On a template error it prints the message to stderr and exits 1.
//
//   node render_jinja.mjs TEMPLATE.jinja CONTEXT.json [--now EPOCH_SECONDS]
//
// --now pins the clock that strftime_now() reads (in UTC), so goldens do not change by the day.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const args = process.argv.slice(2);
const nowIndex = args.indexOf("--now");
let now;
if (nowIndex >= 0) {
  now = Number(args[nowIndex + 1]) * 1000;
  args.splice(nowIndex, 2);
}
if (args.length !== 2) {
  console.error("usage: node render_jinja.mjs TEMPLATE.jinja CONTEXT.json [--now EPOCH_SECONDS]");
  process.exit(2);
}

if (now !== undefined) {
  // strftime_now() calls `new Date()` and reads local time fields: pin both the instant and the zone.
  process.env.TZ = "UTC";
  const RealDate = Date;
  globalThis.Date = class extends RealDate {
    constructor(...a) {
      if (a.length === 0) super(now);
      else super(...a);
    }
    static now() {
      return now;
    }
  };
}

const source = readFileSync(args[0], "utf8");
const context = JSON.parse(readFileSync(args[1], "utf8"));
try {
  const out = new Template(source).render(context);
  process.stdout.write(out);
} catch (err) {
  console.error(String(err && err.message !== undefined ? err.message : err));
  // exitCode rather than exit(): stdout to a pipe is flushed asynchronously.
  process.exitCode = 1;
}
