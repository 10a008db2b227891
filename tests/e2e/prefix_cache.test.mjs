// The prefix cache through the daemon on the real CPU engine (docs/prefix-cache.md): a
// conversation's second turn reports cached prompt tokens in usage (chat and completions,
// streaming and not) and gives the same greedy text as a daemon with --prefix-cache=false;
// /metrics counts hits (deltaserve_ and vLLM names); POST /v1/cache/reset is behind the API key
// and returns every reference and byte. Token conversations: return_token_ids gives a
// completion's prompt and output ids (streamed and not, one id per counted token), and a
// conversation resent as those ids is reused whole (>= 95% of the earlier turns), also as
// deltaserve-load's multi-turn workload measures it, with the text of a cache-less daemon.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

import { daemonBinary, readSse, scrape, startDaemon } from './daemon.mjs';

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

async function completion(url, body) {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, temperature: 0, return_token_ids: true, ...body }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  if (!body.stream) {
    const r = await res.json();
    const c = r.choices[0];
    return { text: c.text, promptIds: c.prompt_token_ids, outputIds: c.token_ids, usage: r.usage };
  }
  const out = { text: '', promptIds: null, outputIds: [], usage: null };
  for (const data of await readSse(res)) {
    if (data === '[DONE]') continue;
    const chunk = JSON.parse(data);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.text += c.text ?? '';
      if (c.prompt_token_ids) {
        assert.equal(out.promptIds, null, 'prompt ids come once');
        out.promptIds = c.prompt_token_ids;
      }
      out.outputIds.push(...(c.token_ids ?? []));
    }
  }
  return out;
}

async function tokenize(url, prompt, addSpecial) {
  const res = await fetch(`${url}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ prompt, add_special_tokens: addSpecial }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).tokens;
}

test('token conversations: return_token_ids, and a resent conversation reused whole', async () => {
  const { url } = daemons.cached;
  // The ids: the prompt's are /tokenize's, one output id per counted token, streamed and not,
  // and chat puts the prompt's at the top.
  const first = await completion(url, { prompt: `${system} Question one: what is a queue?`, max_tokens: 12 });
  assert.deepEqual(first.promptIds, await tokenize(url, `${system} Question one: what is a queue?`, true));
  assert.equal(first.outputIds.length, first.usage.completion_tokens);
  const streamed = await completion(url, {
    prompt: `${system} Question one: what is a queue?`, max_tokens: 12, stream: true, stream_options: { include_usage: true },
  });
  assert.deepEqual(streamed.promptIds, first.promptIds);
  assert.deepEqual(streamed.outputIds, first.outputIds);
  assert.equal(streamed.text, first.text);
  const chatRes = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0, return_token_ids: true }),
  });
  const chatBody = await chatRes.json();
  assert.ok(chatBody.prompt_token_ids.length > 0);
  assert.equal(chatBody.choices[0].token_ids.length, chatBody.usage.completion_tokens);

  // Three turns resent as ids: each reuses at least 95% of what came before (the earlier
  // prompt and answer), and gives the ids a daemon without the cache gives.
  for (const stream of [false, true]) {
    let history = [];
    for (let turn = 0; turn < 3; ++turn) {
      const fresh = await tokenize(url, `${turn === 0 ? system : '\n'} Turn ${turn}, stream ${stream}: name a data structure.`, turn === 0);
      const prompt = [...history, ...fresh];
      const extra = stream ? { stream: true, stream_options: { include_usage: true } } : {};
      const got = await completion(url, { prompt, max_tokens: 10, ignore_eos: true, ...extra });
      const want = await completion(daemons.plain.url, { prompt, max_tokens: 10, ignore_eos: true });
      assert.deepEqual(got.promptIds, prompt);
      assert.deepEqual(got.outputIds, want.outputIds, `turn ${turn}: the same ids as without the cache`);
      if (turn > 0) {
        const cached = got.usage.prompt_tokens_details.cached_tokens;
        assert.ok(cached >= 0.95 * history.length && cached <= history.length, `turn ${turn}: ${cached} of ${history.length} reused`);
      }
      history = [...got.promptIds, ...got.outputIds];
    }
  }
});

test("deltaserve-load's multi-turn token conversations report the reusable share", () => {
  const load = path.join(path.dirname(path.dirname(daemonBinary())), 'loadtest', 'deltaserve-load');
  if (!existsSync(load)) return;  // a build without the load tool
  const dir = mkdtempSync(path.join(tmpdir(), 'multiturn-'));
  try {
    const json = path.join(dir, 'run.json');
    const r = spawnSync(load, ['--url', daemons.cached.url, '--api-key', key, '--workload', 'multi-turn', '--turns', '3',
      '--concurrency', '2', '--input-tokens', '24', '--output-tokens', '8', '--temperature', '0', '--ignore-eos',
      '--endpoint', 'completions', '--quiet', '--json', json], { encoding: 'utf8', timeout: 120000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    const report = JSON.parse(readFileSync(json, 'utf8'));
    const { reusable_prompt_tokens: reusable, reusable_cached_tokens: cached } = report.prefix_cache;
    assert.ok(reusable > 0, JSON.stringify(report.prefix_cache));
    assert.ok(cached >= 0.95 * reusable, JSON.stringify(report.prefix_cache));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// A response's counters are in /metrics once its last byte has arrived (the engine hands a
// step's events out after publishing that step's stats): a scrape right after needs no retry.
test('/metrics counts a response as soon as it has ended', async () => {
  const { url } = daemons.cached;
  for (const maxTokens of [1, 3]) {
    const before = await scrape(url);
    const got = await completion(url, { prompt: `Counted at once, ${maxTokens}:`, max_tokens: maxTokens, ignore_eos: true });
    const after = await scrape(url);
    const grew = (name) => after.get(name) - before.get(name);
    assert.equal(grew('deltaserve_prompt_tokens_total'), got.usage.prompt_tokens);
    assert.equal(grew('deltaserve_generation_tokens_total'), got.usage.completion_tokens);
    assert.equal(grew('deltaserve_prefix_cache_queries_total'), 1);
    assert.equal(grew('deltaserve_prefix_cache_query_tokens_total'), got.usage.prompt_tokens);
    assert.equal(grew('deltaserve_prefix_cache_hit_tokens_total'), got.usage.prompt_tokens_details.cached_tokens);
    assert.equal(after.get('deltaserve_requests_running'), 0);
  }
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
  assert.equal((await denied.json()).error.code, 'invalid_api_key');
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
