// --split replicas on two CPU "devices" (docs/configuration.md, "Several devices"): the real
// daemon runs one engine per device behind one HTTP front end. Many concurrent requests are
// served by both engines (per-engine series on /metrics); a conversation's later turns go to
// the engine holding its prefix and hit its cache; the greedy outputs equal a one-device
// daemon's; a cancelled stream, a cache reset of every engine and the drain leave every slot,
// block and cached byte back where they started.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { scrape, startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
const daemons = {};
const clients = {};
let startMetrics = null;

before(async () => {
  const common = ['--max-streams', '4', '--context-tokens', '512', '--prefix-checkpoint-tokens', '16'];
  for (const [name, args] of [['replicas', ['--split', 'replicas', '--devices', 'cpu:0,cpu:1', '--vllm-metrics']],
                              ['single', []]]) {
    daemons[name] = await startDaemon({ fake: false, args: [...common, ...args] });
    clients[name] = new OpenAI({ baseURL: `${daemons[name].url}/v1`, apiKey: 'unused', maxRetries: 0 });
  }
  startMetrics = await scrape(daemons.replicas.url);
});

after(async () => {
  for (const d of Object.values(daemons)) {
    const status = await d.stop();
    assert.deepEqual(status, { code: 0, signal: null }, d.output());
  }
});

async function chat(client, messages, maxTokens = 12) {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: maxTokens, temperature: 0, chat_template_kwargs: { enable_thinking: false },
  });
  return { text: r.choices[0].message.content ?? '', usage: r.usage };
}

// Per engine ("0", "1"): the counter's value on that engine.
function perEngine(m, name, labels = {}) {
  return ['0', '1'].map((engine) => m.get(name, { ...labels, engine }) ?? 0);
}

const sum = (values) => values.reduce((a, b) => a + b, 0);

// The first scrape for which `ready(metrics)` holds (5 s at most; then the last one).
async function settled(url, ready) {
  let m = await scrape(url);
  for (let i = 0; i < 200 && !ready(m); ++i) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    m = await scrape(url);
  }
  return m;
}

test('the replicated daemon is ready, lists both engines, and keeps the daemon-wide names', async () => {
  const m = startMetrics;
  assert.equal(m.get('deltaserve_ready'), 1);
  assert.deepEqual(perEngine(m, 'deltaserve_engine_state_slots_capacity'), [4, 4]);
  assert.equal(m.get('deltaserve_state_slots_capacity'), 8);  // the whole daemon
  assert.equal(m.get('deltaserve_engine_state_slots_capacity', { engine: '1', device: 'cpu:1' }), 4);
  for (const reason of ['prefix', 'load']) assert.deepEqual(perEngine(m, 'deltaserve_router_decisions_total', { reason }), [0, 0]);
  assert.ok(m.get('vllm:num_requests_running', { engine: '1' }) !== undefined);
  const dump = await fetch(`${daemons.replicas.url}/health`);
  assert.equal(dump.status, 200);
});

test('concurrent requests are served by both engines, with one device\'s greedy outputs', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Request ${i}: count the letters of the word number ${i * 7}.`);
  const replicated = await Promise.all(prompts.map((p) => chat(clients.replicas, [{ role: 'user', content: p }])));
  const single = [];
  for (let i = 0; i < prompts.length; i += 4) {
    single.push(...await Promise.all(prompts.slice(i, i + 4).map((p) => chat(clients.single, [{ role: 'user', content: p }]))));
  }
  for (let i = 0; i < prompts.length; ++i) assert.equal(replicated[i].text, single[i].text, `prompt ${i}`);
  // An engine reports a step and a finished request just after it delivered their tokens.
  const m = await settled(daemons.replicas.url, (x) => sum(perEngine(x, 'deltaserve_engine_requests_total')) === 16
    && sum(perEngine(x, 'deltaserve_engine_generation_tokens_total')) === x.get('deltaserve_generation_tokens_total'));
  const served = perEngine(m, 'deltaserve_engine_requests_total');
  assert.ok(served[0] > 0 && served[1] > 0, `both engines served: ${served}`);
  assert.equal(served[0] + served[1], 16);
  const routed = perEngine(m, 'deltaserve_router_decisions_total', { reason: 'load' });
  assert.ok(routed[0] > 0 && routed[1] > 0, `routed by load: ${routed}`);
  const generated = perEngine(m, 'deltaserve_engine_generation_tokens_total');
  assert.equal(m.get('deltaserve_generation_tokens_total'), generated[0] + generated[1]);
  const vllmSuccess = m.get('vllm:request_success_total', { engine: '0', finished_reason: 'length' })
    + m.get('vllm:request_success_total', { engine: '0', finished_reason: 'stop' });
  assert.equal(vllmSuccess, 16);
});

test('a conversation stays on the engine that holds its prefix and hits its cache', async () => {
  const system = 'You are a careful assistant. Answer in plain words, cite the file you read, and never invent '
    + 'a function that the code does not define. When unsure, say so and ask for the missing piece.';
  let messages = [{ role: 'system', content: system }, { role: 'user', content: 'Name a prime number.' }];
  let before = await scrape(daemons.replicas.url);
  let turn = await chat(clients.replicas, messages);
  let after = await scrape(daemons.replicas.url);
  // Where the first turn went (counted at submit; a finished request's own counters may lag
  // its response by an instant).
  const routed = (m) => perEngine(m, 'deltaserve_router_decisions_total', { reason: 'load' });
  const home = routed(after)[0] > routed(before)[0] ? 0 : 1;
  assert.equal(routed(after)[home] - routed(before)[home], 1);
  for (const question of ['And another one?', 'Which of the two is larger?', 'Say both again.']) {
    const reference = await chat(clients.single, [...messages, { role: 'assistant', content: turn.text },
                                                  { role: 'user', content: question }]);
    messages = [...messages, { role: 'assistant', content: turn.text }, { role: 'user', content: question }];
    before = after;
    turn = await chat(clients.replicas, messages);
    after = await scrape(daemons.replicas.url);
    assert.equal(turn.text, reference.text, question);
    assert.ok(turn.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(turn.usage));
    const prefix = (m) => perEngine(m, 'deltaserve_router_decisions_total', { reason: 'prefix' });
    const hits = (m) => perEngine(m, 'deltaserve_engine_prefix_cache_hits_total');
    assert.equal(prefix(after)[home] - prefix(before)[home], 1, `${question}: routed for its prefix to engine ${home}`);
    assert.equal(hits(after)[home] - hits(before)[home], 1, `${question}: a cache hit on engine ${home}`);
    assert.equal(hits(after)[1 - home], hits(before)[1 - home]);
  }
});

test('a cancelled stream, a reset of every cache and the end leave nothing behind', async () => {
  const { url } = daemons.replicas;
  // A stream the client abandons after its first token (ignore_eos: it would run to 400): the
  // engine cancels it.
  const before = await scrape(url);
  const controller = new AbortController();
  const stream = await clients.replicas.chat.completions.create(
    { model, messages: [{ role: 'user', content: 'Write a long story about a lighthouse.' }], max_tokens: 400,
      temperature: 0, stream: true, ignore_eos: true },
    { signal: controller.signal });
  let chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content && ++chunks >= 1) {
      controller.abort();
      break;
    }
  }
  let m;
  for (let i = 0; i < 200; ++i) {
    m = await scrape(url);
    if (m.get('deltaserve_requests_running') === 0 && m.get('deltaserve_state_slots_used') === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  assert.equal(m.get('deltaserve_cancellations_total') - before.get('deltaserve_cancellations_total'), 1);
  assert.equal(m.get('deltaserve_requests_finished_total', { finished_reason: 'abort' })
    - before.get('deltaserve_requests_finished_total', { finished_reason: 'abort' }), 1);
  const reset = await fetch(`${url}/v1/cache/reset`, { method: 'POST' });
  assert.equal(reset.status, 200);
  const body = await reset.json();
  assert.deepEqual(body.prefix_cache, { enabled: true, checkpoints: 0, blocks: 0, device_bytes: 0, host_bytes: 0 });
  m = await scrape(url);
  for (const name of ['deltaserve_state_slots_used', 'deltaserve_kv_blocks_used', 'deltaserve_requests_running',
                      'deltaserve_requests_waiting', 'deltaserve_prefix_cache_checkpoints', 'deltaserve_prefix_cache_kv_blocks',
                      'deltaserve_pinned_host_bytes', 'deltaserve_device_memory_used_bytes']) {
    assert.equal(m.get(name), startMetrics.get(name), name);
  }
  for (const name of ['deltaserve_engine_state_slots_used', 'deltaserve_engine_kv_blocks_used',
                      'deltaserve_engine_prefix_cache_checkpoints', 'deltaserve_engine_requests_running']) {
    assert.deepEqual(perEngine(m, name), [0, 0], name);
  }
  assert.equal(m.get('deltaserve_prefix_cache_bytes', { tier: 'device' }), 0);
  // Serving goes on after the reset, by load again.
  const again = await chat(clients.replicas, [{ role: 'user', content: 'Hello after the reset.' }]);
  const reference = await chat(clients.single, [{ role: 'user', content: 'Hello after the reset.' }]);
  assert.equal(again.text, reference.text);
});
