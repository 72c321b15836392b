// Client tests of `sluice serve` with the official `ollama` and `@anthropic-ai/sdk` npm clients
// (tests/e2e/serve_compat_test.cpp starts the server and runs this).
// usage: node serve_clients.mjs BASE_URL API_KEY MODEL
// Ollama: list, chat and generate, streamed and not, the streamed text equal to the whole one.
// Anthropic: messages, streamed messages (the SDK's event accumulation), count_tokens equal to the
// usage of the same messages. Prints one line per check; exits 1 on the first failure.
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";

const [baseURL, apiKey, model] = process.argv.slice(2);
const ollama = new Ollama({ host: baseURL, headers: { Authorization: `Bearer ${apiKey}` } });
const anthropic = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    process.exit(1);
  }
}

const greedy = { temperature: 0, seed: 1, num_predict: 8 };

await check("ollama: list names the served model", async () => {
  const r = await ollama.list();
  assert.equal(r.models.length, 1);
  assert.equal(r.models[0].name, model);
  assert.equal(r.models[0].details.format, "gguf");
});

await check("ollama: chat, streamed and not, agree", async () => {
  const messages = [{ role: "user", content: "Who made the heaven and the earth?" }];
  const r = await ollama.chat({ model, messages, options: greedy });
  assert.equal(r.message.role, "assistant");
  assert.ok(r.message.content.length > 0);
  assert.equal(r.done, true);
  assert.ok(["length", "stop"].includes(r.done_reason));
  assert.ok(r.eval_count > 0 && r.eval_count <= 8);
  assert.ok(r.prompt_eval_count > 0);
  let text = "", last = null;
  for await (const part of await ollama.chat({ model, messages, options: greedy, stream: true })) {
    text += part.message.content;
    last = part;
  }
  assert.equal(text, r.message.content);
  assert.equal(last.done, true);
  assert.equal(last.eval_count, r.eval_count);
});

await check("ollama: generate, streamed and not, agree; context continues", async () => {
  const r = await ollama.generate({ model, prompt: "And God said", raw: true, options: greedy });
  assert.ok(r.response.length > 0);
  assert.equal(r.done, true);
  assert.ok(Array.isArray(r.context) && r.context.length >= 8);
  let text = "";
  for await (const part of await ollama.generate({ model, prompt: "And God said", raw: true, options: greedy, stream: true }))
    text += part.response;
  assert.equal(text, r.response);
  const more = await ollama.generate({ model, prompt: " and", raw: true, context: r.context, options: greedy });
  assert.ok(more.context.length > r.context.length);
});

await check("ollama: an option sluice cannot honour is an error naming it", async () => {
  await assert.rejects(ollama.chat({ model, messages: [{ role: "user", content: "hi" }], options: { mirostat: 2 } }),
                       (e) => { assert.match(String(e.message), /options\.mirostat/); return true; });
});

let usage;
await check("anthropic: messages", async () => {
  const r = await anthropic.messages.create({
    model, max_tokens: 8, temperature: 0, messages: [{ role: "user", content: "Who made the heaven?" }],
  });
  assert.equal(r.type, "message");
  assert.equal(r.role, "assistant");
  assert.equal(r.content[0].type, "text");
  assert.ok(r.content[0].text.length > 0);
  assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 8);
  assert.ok(["max_tokens", "end_turn"].includes(r.stop_reason));
  usage = r;
});

await check("anthropic: streamed messages accumulate to the same message", async () => {
  const stream = anthropic.messages.stream({
    model, max_tokens: 8, temperature: 0, messages: [{ role: "user", content: "Who made the heaven?" }],
  });
  let deltas = "";
  stream.on("text", (t) => { deltas += t; });
  const final = await stream.finalMessage();
  assert.equal(final.content[0].text, usage.content[0].text);
  assert.equal(deltas, usage.content[0].text);
  assert.equal(final.stop_reason, usage.stop_reason);
});

await check("anthropic: count_tokens equals the message's input tokens", async () => {
  const r = await anthropic.messages.countTokens({
    model, messages: [{ role: "user", content: "Who made the heaven?" }],
  });
  assert.equal(r.input_tokens, usage.usage.input_tokens);
});
