// Every error status the daemon produces, each body checked ({error: {message, type, param,
// code}}), through the official client where it has an error class (400, 401, 404, 429,
// 5xx) and through raw fetch where the wire matters (invalid JSON, 405, 413, Retry-After).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { readSse, scrape, sleep, startDaemon } from './daemon.mjs';

const model = 'deltaserve-fake';
const user = (content) => [{ role: 'user', content }];

function checkErrorBody(body, { type, code, param }) {
  assert.ok(body && body.error, `not an error body: ${JSON.stringify(body)}`);
  const e = body.error;
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 10);
  if (type) assert.equal(e.type, type);
  if (code !== undefined) assert.equal(e.code, code);
  if (param !== undefined) assert.equal(e.param, param);
}

describe('client errors (auth on)', () => {
  let daemon;
  let client;
  const key = 'sk-test-key';
  const post = (path, body, headers = {}) =>
    fetch(`${daemon.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  before(async () => {
    daemon = await startDaemon({ args: ['--api-key', key, '--context-tokens', '64', '--max-body-bytes', '4096'] });
    client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: key, maxRetries: 0 });
  });
  after(async () => assert.deepEqual(await daemon.stop(), { code: 0, signal: null }));

  test('401: missing or wrong bearer token; probes stay open', async () => {
    for (const apiKey of ['wrong-key', '']) {
      const bad = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: apiKey || 'x', maxRetries: 0 });
      await assert.rejects(bad.chat.completions.create({ model, messages: user('hi') }), (err) => {
        assert.ok(err instanceof OpenAI.AuthenticationError);
        assert.equal(err.status, 401);
        // OpenAI's body: type invalid_request_error, code invalid_api_key.
        assert.equal(err.type, 'invalid_request_error');
        assert.equal(err.code, 'invalid_api_key');
        return true;
      });
    }
    const missing = await fetch(`${daemon.url}/v1/models`);
    assert.equal(missing.status, 401);
    checkErrorBody(await missing.json(), { type: 'invalid_request_error', code: 'invalid_api_key' });
    const tok = await fetch(`${daemon.url}/tokenize`, { method: 'POST', body: '{"prompt":"a"}' });
    assert.equal(tok.status, 401);
    for (const p of ['/health', '/ready', '/metrics']) assert.equal((await fetch(`${daemon.url}${p}`)).status, 200, p);
    assert.equal((await client.chat.completions.create({ model, messages: user('ok') })).choices[0].message.content, 'ok');
  });

  test('400: invalid JSON', async () => {
    const res = await post('/v1/chat/completions', '{"messages": [');
    assert.equal(res.status, 400);
    checkErrorBody(await res.json(), { type: 'invalid_request_error', code: 'invalid_json', param: null });
  });

  const badRequests = [
    [{ messages: user('x'), frobnicate: 1 }, 'frobnicate', 'unknown_parameter'],
    [{ messages: user('x'), temperature: 3 }, 'temperature', 'invalid_value'],
    [{ messages: user('x'), temperature: 'warm' }, 'temperature', 'invalid_type'],
    [{ messages: user('x'), max_tokens: -1 }, 'max_tokens', 'invalid_value'],
    [{ messages: user('x'), n: 2 }, 'n', 'unsupported_value'],
    [{ messages: user('x'), stop: [1] }, 'stop[0]', 'invalid_type'],
    [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role', 'invalid_value'],
    [{ messages: user('x'), top_logprobs: 3 }, 'top_logprobs', 'invalid_value'],
    [{ messages: user('x'), logit_bias: { 999999: 1 } }, 'logit_bias.999999', 'invalid_value'],
    [{ messages: user('x'.repeat(100)) }, 'messages', 'context_length_exceeded'],
    [{ messages: user('x'), max_tokens: 60 }, 'max_tokens', 'context_length_exceeded'],
    [{ messages: user('{{raise}}') }, 'messages', 'invalid_value'],
  ];
  for (const [body, param, code] of badRequests) {
    test(`400: ${param} (${code})`, async () => {
      await assert.rejects(client.chat.completions.create({ model, ...body }), (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, String(err));
        assert.equal(err.status, 400);
        assert.equal(err.type, 'invalid_request_error');
        assert.equal(err.param, param);
        assert.equal(err.code, code);
        return true;
      });
    });
  }

  test('400 on completions: prompt longer than the context', async () => {
    await assert.rejects(client.completions.create({ model, prompt: 'y'.repeat(200) }),
      (err) => err instanceof OpenAI.BadRequestError && err.param === 'prompt' && err.code === 'context_length_exceeded');
  });

  test('404: unknown path and unknown model', async () => {
    const res = await post('/v1/nothing-here', {});
    assert.equal(res.status, 404);
    checkErrorBody(await res.json(), { type: 'invalid_request_error', code: 'unknown_url' });
    const root = await fetch(`${daemon.url}/nope`);
    assert.equal(root.status, 404);
    await assert.rejects(client.chat.completions.create({ model: 'gpt-99', messages: user('x') }),
      (err) => err instanceof OpenAI.NotFoundError && err.type === 'invalid_request_error' &&
        err.code === 'model_not_found' && err.param === 'model');
  });

  test('405: wrong method on a known path', async () => {
    const res = await fetch(`${daemon.url}/v1/chat/completions`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.status, 405);
    assert.equal(res.headers.get('allow'), 'POST');
    checkErrorBody(await res.json(), { type: 'invalid_request_error', code: 'method_not_allowed' });
    const health = await fetch(`${daemon.url}/health`, { method: 'POST' });
    assert.equal(health.status, 405);
  });

  test('413: body over --max-body-bytes', async () => {
    const res = await post('/v1/chat/completions', JSON.stringify({ messages: user('z'.repeat(10000)) }));
    assert.equal(res.status, 413);
    checkErrorBody(await res.json(), { type: 'invalid_request_error', code: 'request_too_large' });
    // On /v1/messages the headers name the route, so the same 413 comes in Anthropic's format.
    const anthropic = await post('/v1/messages', JSON.stringify({ messages: user('z'.repeat(10000)) }));
    assert.equal(anthropic.status, 413);
    assert.deepEqual(await anthropic.json(), { type: 'error', error: { type: 'request_too_large',
      message: 'The request body is larger than the limit of 4096 bytes.' } });
    // The server still serves new connections afterwards.
    assert.equal((await client.chat.completions.create({ model, messages: user('after') })).choices[0].message.content, 'after');
  });

  // The metric's label is the status's class, not the body's type: 401 and 404 bodies say
  // invalid_request_error (as OpenAI's do), the label still tells them apart.
  test('errors are counted by class in /metrics', async () => {
    const m = await scrape(daemon.url);
    assert.ok(m.get('deltaserve_errors_total', { type: 'invalid_request_error' }) >= badRequests.length);
    assert.ok(m.get('deltaserve_errors_total', { type: 'authentication_error' }) >= 3);
    assert.ok(m.get('deltaserve_errors_total', { type: 'not_found_error' }) >= 3);
  });
});

describe('429 when the waiting queue is full', () => {
  let daemon;
  before(async () => {
    daemon = await startDaemon({ args: ['--max-streams', '1', '--max-waiting', '1', '--fake-step-us', '20000'] });
  });
  after(async () => assert.deepEqual(await daemon.stop(), { code: 0, signal: null }));

  test('a third request gets 429 with Retry-After, the others are unharmed', async () => {
    const client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const abort = new AbortController();
    const long = { model, messages: user('L'.repeat(300)), stream: true };
    const until = async (name, value) => {
      for (let i = 0; i < 500 && (await scrape(daemon.url)).get(name) !== value; ++i) await sleep(10);
      assert.equal((await scrape(daemon.url)).get(name), value, name);
    };
    const running = await client.chat.completions.create(long, { signal: abort.signal });
    const iterator = running[Symbol.asyncIterator]();
    await until('deltaserve_requests_running', 1); // the first holds the only slot
    const waiting = client.chat.completions.create(long, { signal: abort.signal });
    await until('deltaserve_requests_waiting', 1); // the second fills the queue
    await assert.rejects(client.chat.completions.create({ model, messages: user('third') }), (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, String(err));
      assert.equal(err.status, 429);
      assert.equal(err.headers.get('retry-after'), '1');
      assert.equal(err.type, 'rate_limit_error');
      assert.equal(err.code, 'queue_full');
      return true;
    });
    abort.abort();
    await waiting.catch(() => {});
    await iterator.return?.();
  });
});

describe('503 while loading', () => {
  test('/ready and generation answer 503 until the model is loaded; /health is 200', async () => {
    const daemon = await startDaemon({ args: ['--fake-load-ms', '2500'], waitReady: false });
    try {
      const ready = await fetch(`${daemon.url}/ready`);
      assert.equal(ready.status, 503);
      assert.equal(ready.headers.get('retry-after'), '1');
      checkErrorBody(await ready.json(), { type: 'service_unavailable_error', code: 'model_loading' });
      assert.equal((await fetch(`${daemon.url}/health`)).status, 200);
      assert.equal((await scrape(daemon.url)).get('deltaserve_ready'), 0);
      const client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'x', maxRetries: 0 });
      await assert.rejects(client.chat.completions.create({ model, messages: user('x') }),
        (err) => err instanceof OpenAI.InternalServerError && err.status === 503 && err.code === 'model_loading');
      for (let i = 0; i < 100 && (await fetch(`${daemon.url}/ready`)).status !== 200; ++i) await sleep(50);
      assert.equal((await client.chat.completions.create({ model, messages: user('now') })).choices[0].message.content, 'now');
      assert.equal((await scrape(daemon.url)).get('deltaserve_ready'), 1);
    } finally {
      assert.deepEqual(await daemon.stop(), { code: 0, signal: null });
    }
  });
});

// Starts a stream and returns once its headers arrived (the engine accepted it); `events`
// then resolves to the SSE data payloads.
async function startStream(url, body) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, stream: true, ...body }),
  });
  assert.equal(res.status, 200);
  return { events: readSse(res) };
}

describe('SIGTERM', () => {
  test('drain: in-flight streams finish, new work gets 503, exit 0', async () => {
    const daemon = await startDaemon({ args: ['--fake-step-us', '5000', '--shutdown-grace-s', '20'] });
    const inflight = await startStream(daemon.url, { messages: user('d'.repeat(100)) });
    daemon.proc.kill('SIGTERM');
    await sleep(100);
    const ready = await fetch(`${daemon.url}/ready`);
    assert.equal(ready.status, 503);
    checkErrorBody(await ready.json(), { code: 'server_draining' });
    assert.equal((await scrape(daemon.url)).get('deltaserve_ready'), 0);
    const refused = await fetch(`${daemon.url}/v1/completions`, { method: 'POST', body: '{"prompt":"x"}' });
    assert.equal(refused.status, 503);
    checkErrorBody(await refused.json(), { type: 'service_unavailable_error', code: 'server_draining' });
    const events = await inflight.events;
    assert.equal(events.at(-1), '[DONE]');
    const finish = JSON.parse(events.at(-2)).choices[0];
    assert.equal(finish.finish_reason, 'stop');
    assert.deepEqual(await daemon.stop(), { code: 0, signal: null });
  });

  test('grace over: the rest are cancelled with an error event, exit 0', async () => {
    const daemon = await startDaemon({ args: ['--fake-step-us', '5000', '--shutdown-grace-s', '1'] });
    const inflight = await startStream(daemon.url, { messages: user('forever'), ignore_eos: true, max_tokens: 3000 });
    daemon.proc.kill('SIGTERM');
    const events = await inflight.events;
    assert.equal(events.at(-1), '[DONE]');
    const last = JSON.parse(events.at(-2));
    checkErrorBody(last, { type: 'service_unavailable_error', code: 'server_shutdown' });
    assert.equal(events.filter((e) => e !== '[DONE]' && JSON.parse(e).choices?.[0]?.finish_reason).length, 0);
    assert.deepEqual(await daemon.stop(), { code: 0, signal: null });
  });
});
