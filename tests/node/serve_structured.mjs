// Structured output through the official `openai` npm client (tests/e2e/serve_structured_test.cpp
// starts the server on a model with Qwen3's template and runs this).
// usage: node serve_structured.mjs BASE_URL API_KEY
// chat.completions.parse with a zod response format (the client parses the reply and zod
// validates it), and with a zod function tool forced by tool_choice (parsed arguments). Sampling
// at temperature 1 over several seeds; the responses API with a forced function tool, streamed
// and not. Prints one line per check; exits 1 on the first failure.
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

// The responses API with a function tool: the call comes back as a function_call output item
// (streamed: its arguments as function_call_arguments events), and its output continues the
// conversation through previous_response_id.
await check("responses: a forced function tool, streamed and not, and its output continued", async () => {
  const tools = [{ type: "function", name: "get_weather", parameters: zodResponseFormat(Weather, "w").json_schema.schema, strict: true }];
  const r = await client.responses.create({
    model: "sluice", input: "Weather in Paris?", tools, tool_choice: "required", parallel_tool_calls: false,
    temperature: 1, seed: 3, max_output_tokens: 200,
  });
  const calls = r.output.filter((o) => o.type === "function_call");
  assert.equal(calls.length, 1, JSON.stringify(r.output));
  assert.equal(calls[0].name, "get_weather");
  Weather.parse(JSON.parse(calls[0].arguments));
  assert.ok(calls[0].call_id);

  const stream = client.responses.stream({
    model: "sluice", input: "Weather in Paris?", tools, tool_choice: { type: "function", name: "get_weather" },
    parallel_tool_calls: false, temperature: 1, seed: 4, max_output_tokens: 200,
  });
  let deltas = "", done = null;
  stream.on("response.function_call_arguments.delta", (e) => { deltas += e.delta; });
  stream.on("response.function_call_arguments.done", (e) => { done = e.arguments; });
  const final = await stream.finalResponse();
  const call = final.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(final.output));
  assert.equal(deltas, call.arguments);
  assert.equal(done, call.arguments);
  Weather.parse(JSON.parse(call.arguments));

  const next = await client.responses.create({
    model: "sluice", previous_response_id: r.id, max_output_tokens: 8, temperature: 0, tools,
    input: [{ type: "function_call_output", call_id: calls[0].call_id, output: "18 degrees" }],
  });
  // A random-weight model rarely ends within 8 tokens: then the response is incomplete, saying why.
  if (next.status !== "completed") assert.deepEqual([next.status, next.incomplete_details], ["incomplete", { reason: "max_output_tokens" }]);
  assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  // All of the first prompt but the tail a template renders differently for a past assistant turn.
  assert.ok(next.usage.input_tokens_details.cached_tokens >= 0.75 * r.usage.input_tokens, JSON.stringify(next.usage));
});
