// The daemon with its model split by layers over two CPU "devices" (--devices cpu:0,cpu:1
// --split layers, docs/configuration.md "Several devices"): greedy completions and chats,
// streaming and not, speculation on, give the same text as a one-device daemon; /metrics
// counts the activation bytes that crossed and each device's layers and memory; bad device
// lists and ranges stop the daemon with exit 2 (or 1 for ranges the model does not have) and
// a line that names the problem.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';

import { daemonBinary, scrape, startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
const daemons = {};
const clients = {};

before(async () => {
  const common = ['--max-streams', '4', '--context-tokens', '512', '--cpu-threads', '1'];
  for (const [name, args] of [['one', []], ['split', ['--devices', 'cpu:0,cpu:1', '--split', 'layers']],
                              ['uneven', ['--devices', 'cpu:0,cpu:1', '--split', 'layers', '--split-layers', '0-0,1-7']]]) {
    daemons[name] = await startDaemon({ fake: false, args: [...common, ...args] });
    clients[name] = new OpenAI({ baseURL: `${daemons[name].url}/v1`, apiKey: 'unused', maxRetries: 0 });
  }
});

after(async () => {
  for (const d of Object.values(daemons)) {
    const status = await d.stop();
    assert.deepEqual(status, { code: 0, signal: null }, d.output());
  }
});

async function complete(client, prompt, stream) {
  const body = { model, prompt, max_tokens: 24, temperature: 0 };
  if (!stream) return (await client.completions.create(body)).choices[0].text;
  let text = '';
  for await (const chunk of await client.completions.create({ ...body, stream: true })) text += chunk.choices[0]?.text ?? '';
  return text;
}

test('split daemons answer as the one-device daemon, request after request', async () => {
  const prompts = ['def fibonacci(n):\n', 'The quick brown fox', 'class Stack:\n    def __init__(self):\n'];
  for (const [i, prompt] of prompts.entries()) {
    const stream = i % 2 === 1;
    const expected = await complete(clients.one, prompt, stream);
    assert.ok(expected.length > 0);
    assert.equal(await complete(clients.split, prompt, stream), expected, `split, prompt ${i}`);
    assert.equal(await complete(clients.uneven, prompt, stream), expected, `uneven, prompt ${i}`);
  }
  const messages = [{ role: 'user', content: 'Write a Python function that adds two numbers.' }];
  const chat = async (client) =>
    (await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 })).choices[0].message.content;
  assert.equal(await chat(clients.split), await chat(clients.one));
});

test('/metrics counts the activation hop and each device', async () => {
  const m = await scrape(daemons.split.url);
  const link = { from: 'cpu:0', to: 'cpu:1' };
  assert.ok(m.get('deltaserve_layer_split_transfers_total', link) > 0, m.all('deltaserve_layer_split_transfers_total').join('\n'));
  // Activations are [rows][256] f32: whole rows of 1 KiB cross.
  const bytes = m.get('deltaserve_layer_split_transfer_bytes_total', link);
  assert.ok(bytes > 0 && bytes % 1024 === 0, String(bytes));
  assert.ok(m.get('deltaserve_layer_split_transfer_seconds_total', link) >= 0);
  const layers = [m.get('deltaserve_layer_split_device_layers', { device: 'cpu:0' }),
                  m.get('deltaserve_layer_split_device_layers', { device: 'cpu:1' })];
  assert.equal(layers[0] + layers[1], 8);
  assert.ok(layers[0] >= 1 && layers[1] >= 1);
  assert.ok(m.get('deltaserve_layer_split_device_memory_bytes', { device: 'cpu:1' }) > 0);
  const uneven = await scrape(daemons.uneven.url);
  assert.equal(uneven.get('deltaserve_layer_split_device_layers', { device: 'cpu:0' }), 1);
  assert.equal(uneven.get('deltaserve_layer_split_device_layers', { device: 'cpu:1' }), 7);
  assert.equal((await scrape(daemons.one.url)).all('deltaserve_layer_split_transfers_total').length, 0);
});

test('bad device lists and ranges are refused with a line that names them', () => {
  const cases = [
    [['--devices', 'cpu:0,cpu:0'], 2, 'cpu:0 is listed twice'],
    [['--devices', 'cpu:0,tpu:1'], 2, "'tpu:1' is not a device"],
    [['--devices', 'cpu:0,cuda:0'], 2, 'all devices must be of one kind'],
    [['--devices', 'cpu:0,cpu:1', '--split', 'tensor'], 2, '--split must be one of'],
    [['--devices', 'cpu:0,cpu:1', '--split', 'replicas', '--split-layers', '4,4'], 2, '--split-layers needs --split layers'],
    [['--devices', 'cuda:0,cuda:1', '--split', 'layers'], 2, 'waits for a host with two GPUs'],
    [['--devices', 'cpu:0,cpu:1', '--split', 'layers', '--split-layers', '0-3,5-7'], 2, 'must start at layer 4'],
    [['--devices', 'cpu:0,cpu:1', '--split', 'layers', '--split-layers', '0-7'], 2, 'gives 1 entries for 2 devices'],
    [['--split-layers', '4,4'], 2, '--split-layers needs --devices'],
    [['--device', 'cpu', '--devices', 'cpu:0,cpu:1'], 2, 'give one of them'],
    [['--devices', 'cpu:0,cpu:1', '--split', 'layers', '--split-layers', '0-3,4-9'], 1, 'covers 10 layers but the model has 8'],
  ];
  for (const [args, code, message] of cases) {
    const r = spawnSync(daemonBinary(), ['serve', '--port', '0', '--log-level', 'warn', ...args], { encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, code, `${args.join(' ')}: ${r.stderr}`);
    assert.ok(r.stderr.includes(message), `${args.join(' ')}: ${r.stderr}`);
  }
});
