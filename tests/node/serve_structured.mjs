// Structured output through the official `openai` npm client (tests/e2e/serve_structured_test.cpp
// starts the server on a model with Qwen3's template and runs this).
// usage: node serve_structured.mjs BASE_URL API_KEY
// chat.completions.parse with a zod response format (the client parses the reply and zod
// validates it), and with a zod function tool forced by tool_choice (parsed arguments). Sampling
// at temperature 1 over several seeds. Prints one line per check; exits 1 on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

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

const Event = z.object({
  title: z.string().max(10),
  day: z.string().date(),
  attendees: z.array(z.object({ name: z.string().max(6), vip: z.boolean() })).max(2),
  priority: z.enum(["low", "high"]),
  room: z.number().int().min(1).max(40).nullable(),
});

await check("chat.completions.parse with a zod schema", async () => {
  for (let seed = 1; seed <= 2; ++seed) {
    const r = await client.beta.chat.completions.parse({
      model: "sluice", seed, temperature: 1, max_tokens: 300,
      messages: [{ role: "user", content: "Plan an event." }],
      response_format: zodResponseFormat(Event, "event"),
    });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.ok(m.parsed, `no parsed value in ${JSON.stringify(m)}`);
    assert.deepEqual(Event.parse(JSON.parse(m.content)), m.parsed);
  }
});

const Weather = z.object({ city: z.string().max(12), unit: z.enum(["celsius", "fahrenheit"]), days: z.number().int().min(1).max(7) });

await check("a forced zod function tool returns parsed arguments", async () => {
  for (let seed = 1; seed <= 2; ++seed) {
    const r = await client.beta.chat.completions.parse({
      model: "sluice", seed, temperature: 1, max_tokens: 200,
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: [zodFunction({ name: "get_weather", parameters: Weather })],
      tool_choice: seed % 2 ? "required" : { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(Weather.parse(JSON.parse(call.function.arguments)), call.function.parsed_arguments);
  }
});

await check("a streamed zod response format", async () => {
  const stream = client.beta.chat.completions.stream({
    model: "sluice", seed: 9, temperature: 1, max_tokens: 300,
    messages: [{ role: "user", content: "Plan an event." }],
    response_format: zodResponseFormat(Event, "event"),
  });
  const done = await stream.finalChatCompletion();
  assert.ok(done.choices[0].message.parsed);
  Event.parse(done.choices[0].message.parsed);
});
