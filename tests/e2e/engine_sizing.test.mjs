// Engine sizing options on the real CPU engine: the automatic values fit the explicit ones.
// `--kv-blocks N` with `--context-tokens 0` caps the context by the pool (it refused to start:
// the model's 4096 tokens exceeded the pool); `--max-batched-tokens R` with `--max-streams 0`
// sizes at most R streams (64 streams needed 64 rows a step and the start failed); prefix-cache
// budgets too small for one checkpoint are reported, not silently ignored.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { scrape, startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';

async function complete(url, body) {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, temperature: 0, ...body }),
  });
  return { status: res.status, body: await res.json() };
}

async function stopCleanly(daemon) {
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, daemon.output());
}

test('--kv-blocks alone caps the context by the pool; sequences sharing it all finish', async () => {
  // 8 blocks of 16 tokens, drafts up to 3: one sequence of 125 tokens fits the pool alone.
  const d = await startDaemon({ fake: false, args: ['--kv-blocks', '8', '--max-streams', '4'] });
  try {
    const models = await (await fetch(`${d.url}/v1/models`)).json();
    assert.equal(models.data[0].max_model_len, 125);
    // Four streams on blocks for one: preempted and resumed, each still ends at its length.
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) =>
      complete(d.url, { prompt: `Count to ${i + 3}:`, max_tokens: 60, ignore_eos: true })));
    for (const r of results) {
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.usage.completion_tokens, 60);
    }
    const tooLong = await complete(d.url, { prompt: 'x '.repeat(200), max_tokens: 4 });
    assert.equal(tooLong.status, 400);
    const m = await scrape(d.url);
    assert.ok(m.get('deltaserve_preemptions_total') > 0);
    assert.equal(m.get('deltaserve_kv_blocks_capacity'), 8);
    assert.equal(m.get('deltaserve_kv_blocks_used'), 0);
    assert.equal(m.get('deltaserve_requests_running'), 0);
  } finally {
    await stopCleanly(d);
  }
});

test('--max-batched-tokens below the automatic stream count sizes the streams to fit', async () => {
  const d = await startDaemon({ fake: false, args: ['--max-batched-tokens', '16'] });
  try {
    const m = await scrape(d.url);
    assert.equal(m.get('deltaserve_state_slots_capacity'), 16);
    const results = await Promise.all(Array.from({ length: 2 }, () =>
      complete(d.url, { prompt: 'The quick brown fox', max_tokens: 8 })));
    for (const r of results) assert.equal(r.status, 200, JSON.stringify(r.body));
  } finally {
    await stopCleanly(d);
  }
});

test('prefix-cache budgets below one checkpoint turn the cache off with a warning', async () => {
  const d = await startDaemon({ fake: false, args: ['--prefix-cache-device-bytes', '1000', '--prefix-cache-host-bytes', '0'] });
  try {
    for (let i = 0; i < 2; ++i) {
      const r = await complete(d.url, { prompt: 'The same prompt twice', max_tokens: 4 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const m = await scrape(d.url);
    assert.equal(m.get('deltaserve_prefix_cache_queries_total'), 0);
    assert.match(d.output(), /prefix cache off: --prefix-cache-device-bytes 1000 and --prefix-cache-host-bytes 0 hold no recurrent-state checkpoint/);
  } finally {
    await stopCleanly(d);
  }
});
