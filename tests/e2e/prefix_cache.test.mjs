// The prefix cache through the daemon on the real CPU engine (docs/prefix-cache.md): a
// conversation's second turn reports cached prompt tokens in usage (chat and completions,
// streaming and not) and gives the same greedy text as a daemon with --prefix-cache=false;
// /metrics counts hits (deltaserve_ and vLLM names); POST /v1/cache/reset is behind the API key
// and returns every reference and byte.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { scrape, startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
const key = 'prefix-cache-test-key';
const daemons = {};
const clients = {};

before(async () => {
  const common = ['--max-streams', '4', '--context-tokens', '512', '--api-key', key, '--prefix-checkpoint-tokens', '16'];
  for (const [name, args] of [['cached', ['--vllm-metrics']], ['plain', ['--prefix-cache=false']]]) {
    daemons[name] = await startDaemon({ fake: false, args: [...common, ...args] });
    clients[name] = new OpenAI({ baseURL: `${daemons[name].url}/v1`, apiKey: key, maxRetries: 0 });
  }
});

after(async () => {
  for (const d of Object.values(daemons)) {
    const status = await d.stop();
    assert.deepEqual(status, { code: 0, signal: null }, d.output());
  }
});

const system = 'You are a careful assistant. Answer in plain words, cite the file you read, and never invent '
  + 'a function that the code does not define. When unsure, say so and ask for the missing piece.';

async function chat(client, messages, stream) {
  const body = { model, messages, max_tokens: 16, temperature: 0 };
  if (!stream) {
    const r = await client.chat.completions.create(body);
    return { text: r.choices[0].message.content ?? '', usage: r.usage };
  }
  const s = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += c.delta?.content ?? '';
  }
  return { text, usage };
}

test('a second turn is served from the cache, with the same text as without it', async () => {
  for (const stream of [false, true]) {
    const turn1 = [{ role: 'system', content: system }, { role: 'user', content: `Name a prime (stream ${stream}).` }];
    const first = await chat(clients.cached, turn1, stream);
    // The first conversation starts cold; the second shares the system prompt with it.
    if (!stream) assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
    else assert.ok(first.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(first.usage));
    const turn2 = [...turn1, { role: 'assistant', content: first.text }, { role: 'user', content: 'And another one?' }];
    const second = await chat(clients.cached, turn2, stream);
    assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
    assert.ok(second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens);
    const reference = await chat(clients.plain, turn2, stream);
    assert.equal(second.text, reference.text);
    assert.equal(reference.usage.prompt_tokens_details.cached_tokens, 0);
  }
});

test('completions report cached tokens too, streaming and not', async () => {
  const prompt = `${system}\nQuestion: what is a stack?\nAnswer:`;
  await clients.cached.completions.create({ model, prompt, max_tokens: 4, temperature: 0 });
  const again = await clients.cached.completions.create({ model, prompt: `${prompt} A stack is`, max_tokens: 4, temperature: 0 });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
  const s = await clients.cached.completions.create({
    model, prompt: `${prompt} It is`, max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let usage = null;
  for await (const chunk of s) if (chunk.usage) usage = chunk.usage;
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(usage));
});

test('metrics count hits; the reset is behind the key and returns everything', async () => {
  const { url } = daemons.cached;
  let m = await scrape(url);
  assert.ok(m.get('deltaserve_prefix_cache_hits_total') > 0);
  assert.ok(m.get('deltaserve_prefix_cache_queries_total') >= m.get('deltaserve_prefix_cache_hits_total'));
  assert.ok(m.get('vllm:prefix_cache_hits_total', { model_name: model }) > 0);
  assert.ok(m.get('vllm:prefix_cache_queries_total', { model_name: model }) > m.get('vllm:prefix_cache_hits_total', { model_name: model }));
  assert.ok(m.get('deltaserve_prefix_cache_bytes', { tier: 'device' }) > 0);
  assert.ok(m.get('deltaserve_prefix_cache_checkpoints') > 0);

  const denied = await fetch(`${url}/v1/cache/reset`, { method: 'POST' });
  assert.equal(denied.status, 401);
  assert.equal((await denied.json()).error.type, 'authentication_error');
  const wrongMethod = await fetch(`${url}/v1/cache/reset`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(wrongMethod.status, 405);
  const reset = await fetch(`${url}/v1/cache/reset`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
  assert.equal(reset.status, 200);
  const body = await reset.json();
  assert.deepEqual(body.prefix_cache, { enabled: true, checkpoints: 0, blocks: 0, device_bytes: 0, host_bytes: 0 });
  assert.equal(body.kv_blocks_used, 0);
  m = await scrape(url);
  assert.equal(m.get('deltaserve_prefix_cache_checkpoints'), 0);
  assert.equal(m.get('deltaserve_prefix_cache_kv_blocks'), 0);
  assert.equal(m.get('deltaserve_prefix_cache_bytes', { tier: 'device' }), 0);
  assert.equal(m.get('deltaserve_prefix_cache_bytes', { tier: 'host' }), 0);
  assert.equal(m.get('deltaserve_kv_blocks_used'), 0);
  // Serving goes on after the reset.
  const after1 = await chat(clients.cached, [{ role: 'user', content: 'Hello after the reset.' }], false);
  const after2 = await chat(clients.cached, [{ role: 'user', content: 'Hello after the reset.' }], false);
  assert.equal(after1.text, after2.text);
});
