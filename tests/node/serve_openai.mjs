// Client tests of `sluice serve` with the official `openai` npm client (tests/e2e/serve_test.cpp
// starts the server and runs this). usage: node serve_openai.mjs BASE_URL API_KEY
// Checks chat and completions, streaming and not, usage, stop sequences, logprobs, a 400 for an
// out-of-range field, harmless fields and n > 1, the responses API (text, streamed,
// previous_response_id), a tool-call turn, and that 8 concurrent
// greedy requests each get exactly the reply the same request gets alone. Prints one line per
// check; exits 1 on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const greedy = { temperature: 0, seed: 1 };

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

async function completion(prompt, extra = {}) {
  return client.completions.create({ model: "sluice", prompt, max_tokens: 12, ...greedy, ...extra });
}

async function streamedCompletion(prompt, extra = {}) {
  const stream = await client.completions.create({ model: "sluice", prompt, max_tokens: 12, stream: true, ...greedy, ...extra });
  let text = "", finish = null;
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      text += chunk.choices[0].text;
      finish = chunk.choices[0].finish_reason ?? finish;
    }
  }
  return { text, finish };
}

async function chat(content, extra = {}) {
  return client.chat.completions.create({ model: "sluice", messages: [{ role: "user", content }], max_tokens: 10, ...greedy, ...extra });
}

async function streamedChat(content, extra = {}) {
  const stream = await client.chat.completions.create({
    model: "sluice", messages: [{ role: "user", content }], max_tokens: 10, stream: true,
    stream_options: { include_usage: true }, ...greedy, ...extra,
  });
  let text = "", finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length) {
      text += chunk.choices[0].delta.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
  }
  return { text, finish, usage };
}

await check("models.list reports the model", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
  assert.ok(models.data[0].id.length > 0);
});

let reference;
await check("completions: text, finish_reason and usage", async () => {
  const r = await completion("And God said");
  reference = r.choices[0].text;
  assert.ok(reference.length > 0, "empty completion");
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 12);
  assert.ok(r.usage.prompt_tokens >= 3);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

await check("completions: streamed text equals the non-streamed text", async () => {
  const s = await streamedCompletion("And God said");
  assert.equal(s.text, reference);
  assert.equal(s.finish, "length");
});

await check("completions: a stop sequence ends the text before it", async () => {
  // A word from the middle of the greedy continuation: the reply must be the text before it.
  const words = reference.trim().split(/\s+/);
  const stop = " " + words[Math.min(2, words.length - 1)];
  const cut = reference.indexOf(stop);
  assert.ok(cut >= 0);
  const r = await completion("And God said", { stop: [stop, "@@never@@"] });
  assert.equal(r.choices[0].text, reference.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, "stop");
  const s = await streamedCompletion("And God said", { stop });
  assert.equal(s.text, reference.slice(0, cut));
  assert.equal(s.finish, "stop");
});

await check("chat: non-streamed and streamed replies agree, with usage", async () => {
  const r = await chat("Who made the heaven and the earth?");
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  const text = r.choices[0].message.content;
  assert.ok(text.length > 0);
  assert.equal(r.usage.completion_tokens, 10);
  const s = await streamedChat("Who made the heaven and the earth?");
  assert.equal(s.text, text);
  assert.equal(s.finish, "length");
  assert.deepEqual(s.usage, r.usage);
});

await check("chat: max_tokens, seed and sampling parameters are honoured", async () => {
  const a = await chat("Tell me of Moses", { temperature: 0.9, top_p: 0.9, top_k: 20, min_p: 0.05, seed: 7, max_tokens: 6 });
  const b = await chat("Tell me of Moses", { temperature: 0.9, top_p: 0.9, top_k: 20, min_p: 0.05, seed: 7, max_tokens: 6 });
  assert.equal(a.usage.completion_tokens, 6);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content, "same seed, different text");
  const p = await chat("Tell me of Moses", { presence_penalty: 1.5, frequency_penalty: 1.0, max_tokens: 6 });
  assert.equal(p.usage.completion_tokens, 6);
});

await check("errors: a bad parameter is a 400 naming the field", async () => {
  await assert.rejects(chat("hi", { temperature: 7 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "temperature");
    return true;
  });
});

await check("logprobs and unsupported fields through the client", async () => {
  const r = await chat("And God said", { max_tokens: 4, logprobs: true, top_logprobs: 2 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy
  }
  await assert.rejects(chat("hi", { logit_bias: { 5: 1000 } }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "logit_bias");
    return true;
  });
  // Harmless fields the client sends are accepted; n > 1 gives that many choices.
  const h = await chat("hi", { max_tokens: 2, store: true, metadata: { a: "b" }, user: "u", service_tier: "auto", n: 2 });
  assert.equal(h.choices.length, 2);
  assert.deepEqual(h.choices.map((c) => c.index), [0, 1]);
  // A tool-call turn and its result are accepted in the shape the client builds.
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
  const t = await client.chat.completions.create({
    model: "sluice", max_tokens: 2, ...greedy, tools,
    messages: [{ role: "user", content: "call f" },
               { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
               { role: "tool", tool_call_id: "c1", content: "done" }],
  });
  assert.equal(t.choices[0].message.role, "assistant");
});

await check("responses: text, streamed events, previous_response_id from the prefix cache", async () => {
  const r = await client.responses.create({ model: "sluice", input: "Who made the heaven?", max_output_tokens: 6, temperature: 0 });
  assert.equal(r.object, "response");
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, r.usage.total_tokens - r.usage.input_tokens);
  const stream = client.responses.stream({ model: "sluice", input: "Who made the heaven?", max_output_tokens: 6, temperature: 0 });
  let deltas = "";
  stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const final = await stream.finalResponse();
  assert.equal(deltas, r.output_text);
  assert.equal(final.output[0].content[0].text, r.output_text);
  assert.equal(final.status, r.status);
  const next = await client.responses.create({
    model: "sluice", input: "And the earth?", previous_response_id: r.id, max_output_tokens: 4, temperature: 0 });
  assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  assert.ok(next.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens, JSON.stringify(next.usage));
  await assert.rejects(client.responses.create({ model: "sluice", input: "x", previous_response_id: "resp_nope" }),
                       (e) => { assert.equal(e.status, 404); return true; });
});

await check("concurrency: 8 clients get their single-client greedy replies", async () => {
  const prompts = ["And God said", "The LORD is my", "In the beginning", "Blessed are the",
                   "And it came to pass", "Thou shalt not", "For God so loved", "Let there be"];
  const run = (p, i) => (i % 2 ? streamedCompletion(p, { max_tokens: 16 }).then((s) => s.text)
                               : completion(p, { max_tokens: 16 }).then((r) => r.choices[0].text));
  const alone = [];
  for (const [i, p] of prompts.entries()) alone.push(await run(p, i));
  const together = await Promise.all(prompts.map(run));
  for (const [i, p] of prompts.entries()) assert.equal(together[i], alone[i], `prompt "${p}"`);
  const chats = await Promise.all(prompts.map((p) => chat(p).then((r) => r.choices[0].message.content)));
  for (const [i, p] of prompts.entries()) assert.equal(chats[i], (await chat(p)).choices[0].message.content, `chat "${p}"`);
});
