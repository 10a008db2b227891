// Sampled requests on the daemon with the real CPU engine and the embedded model, driven by the
// official openai client: a seeded request gives the same text without speculation and with
// it (the default, and depth 3), streamed or not, alone or among concurrent requests, under
// preemption and from the prefix cache; unseeded requests differ from each other; parameters
// that keep one token give the greedy text; seeds across the integer range are taken; n > 1
// is a clear 400.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { scrape, startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
const prompts = ['def fibonacci(n):\n', 'The quick brown fox', 'It was a dark and stormy night;', 'import os\nimport sys\n'];

const daemons = {};
const clients = {};

before(async () => {
  for (const [name, args] of [['plain', ['--draft-depth', '0']], ['spec', []], ['deep', ['--draft-depth', '3']]]) {
    daemons[name] = await startDaemon({ fake: false, args: ['--max-streams', '8', '--context-tokens', '512', ...args] });
    clients[name] = new OpenAI({ baseURL: `${daemons[name].url}/v1`, apiKey: 'none', maxRetries: 0 });
  }
});

after(async () => {
  for (const d of Object.values(daemons)) {
    const status = await d.stop();
    assert.deepEqual(status, { code: 0, signal: null }, d.output());
  }
});

async function complete(client, params) {
  if (!params.stream) {
    const r = await client.completions.create({ model, ...params });
    return { text: r.choices[0].text, finish: r.choices[0].finish_reason, tokens: r.usage.completion_tokens };
  }
  const stream = await client.completions.create({ model, ...params, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let tokens = 0;
  for await (const chunk of stream) {
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
    for (const c of chunk.choices) {
      text += c.text ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, tokens };
}

test('a seeded sampled request gives one text with and without speculation, streamed or not, alone or together', async () => {
  const params = (i) => ({ prompt: prompts[i % 4], max_tokens: 24, temperature: 0.9, top_p: 0.95, top_k: 40, seed: 1000 + i });
  const alone = [];
  for (let i = 0; i < 6; ++i) alone.push(await complete(clients.plain, params(i)));
  for (const a of alone) {
    assert.equal(a.finish, 'length');
    assert.equal(a.tokens, 24);
  }
  for (const name of ['plain', 'spec', 'deep']) {
    for (const stream of [false, true]) {
      const together = await Promise.all(Array.from({ length: 6 }, (_, i) => complete(clients[name], { ...params(i), stream })));
      for (let i = 0; i < 6; ++i) assert.equal(together[i].text, alone[i].text, `${name}, stream ${stream}, request ${i}`);
    }
  }
  // Mixed with host-sampled requests (logprobs, penalties) in the same steps.
  const mixed = await Promise.all([
    ...Array.from({ length: 6 }, (_, i) => complete(clients.deep, params(i))),
    complete(clients.deep, { prompt: prompts[0], max_tokens: 24, temperature: 1, logprobs: 2 }),
    complete(clients.deep, { prompt: prompts[1], max_tokens: 24, temperature: 1, presence_penalty: 1.5, seed: 5 }),
  ]);
  for (let i = 0; i < 6; ++i) assert.equal(mixed[i].text, alone[i].text, `mixed, request ${i}`);
  const penalised = await complete(clients.plain, { prompt: prompts[1], max_tokens: 24, temperature: 1, presence_penalty: 1.5, seed: 5 });
  assert.equal(mixed[7].text, penalised.text);
});

test('seeded sampled logprobs agree with and without speculation, streamed or not', async () => {
  const messages = [{ role: 'user', content: 'Name three colours.' }];
  const params = { model, messages, max_tokens: 20, temperature: 0.9, seed: 123, logprobs: true, top_logprobs: 2 };
  const whole = async (client) => (await client.chat.completions.create(params)).choices[0].logprobs.content;
  const streamed = async (client) => {
    const out = [];
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
      out.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    }
    return out;
  };
  const reference = await whole(clients.plain);
  assert.equal(reference.length, 20);
  for (const [name, got] of [['deep', await whole(clients.deep)], ['plain streamed', await streamed(clients.plain)],
                             ['deep streamed', await streamed(clients.deep)]]) {
    assert.deepEqual(got.map((t) => [t.token, t.logprob, t.top_logprobs.map((a) => a.token)]),
                     reference.map((t) => [t.token, t.logprob, t.top_logprobs.map((a) => a.token)]), name);
  }
});

test('unseeded sampled requests differ from each other', async () => {
  for (const name of ['plain', 'deep']) {
    const texts = await Promise.all(Array.from({ length: 4 }, () =>
      complete(clients[name], { prompt: prompts[2], max_tokens: 24, temperature: 1.0 }).then((r) => r.text)));
    assert.ok(new Set(texts).size >= 3, `${name}: ${JSON.stringify(texts)}`);
  }
});

test('parameters that keep one token give the greedy text', async () => {
  const greedy = await complete(clients.plain, { prompt: prompts[0], max_tokens: 16, temperature: 0 });
  for (const extra of [{ top_k: 1 }, { min_p: 1 }, { top_p: 1e-9 }, { temperature: 1e-6 }, { temperature: 1e-39 }]) {
    for (const name of ['plain', 'deep']) {
      for (const stream of [false, true]) {
        const r = await complete(clients[name], { prompt: prompts[0], max_tokens: 16, temperature: 1.5, seed: 3, ...extra, stream });
        assert.equal(r.text, greedy.text, `${JSON.stringify(extra)} on ${name}, stream ${stream}`);
      }
    }
  }
});

test('seeds across the 64-bit range are taken and are deterministic; n > 1 is refused', async () => {
  for (const seed of [0, -1, 1, 2 ** 53 - 1, -(2 ** 53)]) {
    const a = await complete(clients.deep, { prompt: prompts[1], max_tokens: 12, temperature: 1, seed });
    const b = await complete(clients.plain, { prompt: prompts[1], max_tokens: 12, temperature: 1, seed });
    assert.equal(a.text, b.text, `seed ${seed}`);
  }
  const msgs = [{ role: 'user', content: 'Say hello.' }];
  const chat = (c) => c.chat.completions.create({ model, messages: msgs, max_tokens: 12, temperature: 0.7, seed: 77 });
  const [x, y] = [await chat(clients.deep), await chat(clients.plain)];
  assert.equal(x.choices[0].message.content, y.choices[0].message.content);
  assert.equal(x.choices[0].message.reasoning_content, y.choices[0].message.reasoning_content);
  await assert.rejects(complete(clients.spec, { prompt: prompts[1], max_tokens: 4, temperature: 1, n: 2 }),
    (e) => e.status === 400 && /\bn\b/.test(e.message));
  await assert.rejects(clients.spec.chat.completions.create({ model, messages: msgs, max_tokens: 4, n: 3 }),
    (e) => e.status === 400 && /\bn\b/.test(e.message));
});

test('stop sequences end sampled output the same way with and without speculation', async () => {
  const base = { prompt: prompts[3], max_tokens: 40, temperature: 0.8, seed: 21 };
  const full = await complete(clients.plain, base);
  const cut = full.text.slice(8, 10);
  assert.ok(cut.length === 2, JSON.stringify(full.text));
  const expected = full.text.slice(0, full.text.indexOf(cut));
  let tokens = null;
  for (const name of ['plain', 'spec', 'deep']) {
    for (const stream of [false, true]) {
      const r = await complete(clients[name], { ...base, stop: [cut], stream });
      assert.equal(r.text, expected, `${name}, stream ${stream}`);
      assert.equal(r.finish, 'stop');
      // Usage counts the tokens up to the stop, not drafts accepted past it.
      tokens ??= r.tokens;
      assert.equal(r.tokens, tokens, `${name}, stream ${stream}: completion tokens`);
    }
  }
});

test('seeded sampled streams keep their text when a small KV pool preempts them', async () => {
  const tight = await startDaemon({
    fake: false, args: ['--max-streams', '8', '--context-tokens', '256', '--kv-blocks', '24', '--draft-depth', '3'],
  });
  try {
    const client = new OpenAI({ baseURL: `${tight.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const params = (i) => ({ prompt: prompts[i % 4], max_tokens: 64, temperature: 0.9, seed: 300 + i, stream: i % 2 === 0,
                             ...(i % 4 === 1 ? { logprobs: 1 } : {}) });
    const expected = await Promise.all(Array.from({ length: 8 }, (_, i) => complete(clients.plain, params(i))));
    const got = await Promise.all(Array.from({ length: 8 }, (_, i) => complete(client, params(i))));
    for (let i = 0; i < 8; ++i) assert.equal(got[i].text, expected[i].text, `stream ${i}`);
    const m = await scrape(tight.url);
    assert.ok(m.get('deltaserve_preemptions_total') > 0, 'the pool was too small for every stream at once');
  } finally {
    const status = await tight.stop();
    assert.deepEqual(status, { code: 0, signal: null }, tight.output());
  }
});

test('a sampled second turn resumed from the prefix cache draws what it draws without the cache', async () => {
  const uncached = await startDaemon({ fake: false, args: ['--max-streams', '8', '--context-tokens', '512', '--no-prefix-cache'] });
  try {
    const client = new OpenAI({ baseURL: `${uncached.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const opening = 'You are a careful assistant. Answer in plain words, cite the file you read, and never invent a ' +
      'function that the code does not define.\nQ: how do I reverse a list in Python?\nA:';
    const first = await complete(clients.deep, { prompt: opening, max_tokens: 30, temperature: 0.8, seed: 9 });
    const turn = { prompt: `${opening}${first.text}\nQ: and a string?\nA:`, max_tokens: 30, temperature: 0.8, seed: 10 };
    const warm = await clients.deep.completions.create({ model, ...turn });
    const cold = await client.completions.create({ model, ...turn });
    assert.equal(warm.choices[0].text, cold.choices[0].text);
    assert.ok((warm.usage.prompt_tokens_details?.cached_tokens ?? 0) > 0, JSON.stringify(warm.usage));
  } finally {
    const status = await uncached.stop();
    assert.deepEqual(status, { code: 0, signal: null }, uncached.output());
  }
});

test('capacity returns to idle after the sampled requests', async () => {
  for (const [name, d] of Object.entries(daemons)) {
    let m;
    for (let i = 0; i < 100; ++i) {
      m = await scrape(d.url);
      if (m.get('deltaserve_requests_running') === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(m.get('deltaserve_requests_running'), 0, name);
    assert.equal(m.get('deltaserve_kv_blocks_used'), 0, name);
    assert.equal(m.get('deltaserve_state_slots_used'), 0, name);
  }
  const deep = await scrape(daemons.deep.url);
  // Drafts were made (so the identity checks above ran through the verify path). Whether any is
  // accepted is the policy's call: the tiny model's drafts at temperature 0.8-1 are rejected, and
  // on the CPU the policy then stops drafting that kind (scheduler/draft_policy.h).
  const drafted = deep.all('deltaserve_spec_decode_num_draft_tokens_per_pos_total').reduce((s, [, v]) => s + v, 0);
  assert.ok(drafted > 0, 'the depth-3 daemon drafted sampled requests');
});
