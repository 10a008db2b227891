// Hundreds of concurrent requests, a seeded third of them abandoned by their client at a
// random moment (before the headers, mid-stream, or while a non-streamed body is being
// produced). Afterwards /metrics must show the engine back to idle: nothing running or
// waiting, no KV block or state slot held, every per-slot stream rate at 0, the pinned
// host memory unchanged; and the daemon still serves.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { scrape, sleep, startDaemon } from './daemon.mjs';

const model = 'deltaserve-fake';
let daemon;

before(async () => {
  daemon = await startDaemon({ args: ['--max-streams', '8', '--max-waiting', '1024', '--fake-step-us', '1000'] });
});
after(async () => assert.deepEqual(await daemon.stop(), { code: 0, signal: null }, daemon.output()));

// Deterministic pseudo-random numbers (mulberry32), so a failure replays the same way.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function oneRequest(client, random, i, counts) {
  const stream = random() < 0.6;
  const abandon = random() < 0.35;
  const controller = new AbortController();
  const text = `request ${i} ` + 'w'.repeat(20 + Math.floor(random() * 80));
  if (abandon) setTimeout(() => controller.abort(), Math.floor(random() * 40));
  const chat = random() < 0.7;
  try {
    if (chat) {
      const body = { model, messages: [{ role: 'user', content: text }], stream };
      const res = await client.chat.completions.create(body, { signal: controller.signal });
      if (stream) {
        let content = '';
        for await (const chunk of res) content += chunk.choices[0]?.delta?.content ?? '';
        if (controller.signal.aborted) return void counts.aborted++; // the client ends silently
        assert.equal(content, text);
      } else {
        assert.equal(res.choices[0].message.content, text);
      }
    } else {
      // Completions stop at 16 tokens unless told (OpenAI's default): ask for the whole echo.
      const res = await client.completions.create({ model, prompt: text, max_tokens: 256, stream }, { signal: controller.signal });
      if (stream) {
        let content = '';
        for await (const chunk of res) content += chunk.choices[0]?.text ?? '';
        if (controller.signal.aborted) return void counts.aborted++;
        assert.equal(content, text);
      } else {
        assert.equal(res.choices[0].text, text);
      }
    }
    counts.completed++;
  } catch (err) {
    if (!(abandon && (err instanceof OpenAI.APIUserAbortError || err.name === 'AbortError'))) throw err;
    counts.aborted++;
  }
}

test('hundreds of requests with random disconnects leave the engine idle', async () => {
  const before = await scrape(daemon.url);
  const pinnedBytes = before.get('deltaserve_pinned_host_bytes');
  const registrations = before.get('deltaserve_pinned_host_registrations');
  const client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const random = rng(20261130);
  const total = 400;
  const concurrency = 32;
  const counts = { completed: 0, aborted: 0 };
  let next = 0;
  const workers = Array.from({ length: concurrency }, async () => {
    while (next < total) await oneRequest(client, random, next++, counts);
  });
  await Promise.all(workers);
  assert.equal(counts.completed + counts.aborted, total);
  assert.ok(counts.aborted > 50, `only ${counts.aborted} requests were abandoned`);
  assert.ok(counts.completed > 150);

  let m;
  for (let i = 0; i < 200; ++i) {
    m = await scrape(daemon.url);
    if (m.get('deltaserve_requests_running') === 0 && m.get('deltaserve_requests_waiting') === 0 &&
        m.get('deltaserve_kv_blocks_used') === 0 && m.get('deltaserve_state_slots_used') === 0) break;
    await sleep(25);
  }
  assert.equal(m.get('deltaserve_requests_running'), 0);
  assert.equal(m.get('deltaserve_requests_waiting'), 0);
  assert.equal(m.get('deltaserve_kv_blocks_used'), 0);
  assert.equal(m.get('deltaserve_state_slots_used'), 0);
  assert.equal(m.get('deltaserve_kv_blocks_capacity'), before.get('deltaserve_kv_blocks_capacity'));
  const slots = m.all('deltaserve_stream_decode_tokens_per_second');
  assert.equal(slots.length, 8);
  for (const [series, value] of slots) assert.equal(value, 0, series);
  assert.equal(m.get('deltaserve_pinned_host_bytes'), pinnedBytes);
  assert.equal(m.get('deltaserve_pinned_host_registrations'), registrations);
  assert.ok(m.get('deltaserve_cancellations_total') > 0);
  assert.ok(m.get('deltaserve_requests_finished_total', { finished_reason: 'abort' }) > 0);
  assert.ok(m.get('deltaserve_requests_finished_total', { finished_reason: 'stop' }) >= counts.completed);
  assert.ok(m.get('deltaserve_inter_token_latency_seconds_count') > 0);
  assert.ok(m.get('deltaserve_request_decode_tokens_per_second_count') > 0);

  // Still healthy.
  const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'still here' }] });
  assert.equal(c.choices[0].message.content, 'still here');
});
