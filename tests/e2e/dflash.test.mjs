// The daemon serving with the DFlash block drafter (--drafter dflash, the embedded model's
// drafter in models/deltaserve-tiny-moe-dflash): greedy output equals the output of a daemon
// without speculation, alone and 8 at a time, several requests per server lifetime; the
// drafts show in the metrics; bad drafter options (and a layer split, which does not capture the
// drafter's trunk layers) are refused at start with a clear message.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { daemonBinary, scrape, startDaemon } from './daemon.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const model = 'deltaserve-tiny-moe';
const drafter = 'models/deltaserve-tiny-moe-dflash';
const prompts = [
  'def fibonacci(n):\n', 'import os\nimport sys\n', 'class Stack:\n', 'The quick brown fox',
  'It was a dark and stormy night;', 'for i in range(10):\n', '# Copyright (C) 2001\n', 'Debian is',
];

async function complete(url, prompt, maxTokens) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: maxTokens, temperature: 0 }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const body = await r.json();
  return { text: body.choices[0].text, tokens: body.usage.completion_tokens };
}

const daemons = {};

before(async () => {
  const common = ['--max-streams', '8', '--context-tokens', '512'];
  daemons.plain = await startDaemon({ fake: false, args: [...common, '--drafter', 'none'] });
  daemons.dflash = await startDaemon({ fake: false, args: [...common, '--drafter', 'dflash', '--draft-model', drafter, '--log-level', 'info'] });
});

after(async () => {
  for (const d of Object.values(daemons)) {
    const status = await d.stop();
    assert.deepEqual(status, { code: 0, signal: null }, d.output());
  }
});

test('DFlash drafts leave greedy output unchanged, one at a time and 8 at once', async () => {
  const expected = [];
  for (let i = 0; i < 8; ++i) expected.push(await complete(daemons.plain.url, prompts[i], 24 + i));
  for (let i = 0; i < 3; ++i) assert.deepEqual(await complete(daemons.dflash.url, prompts[i], 24 + i), expected[i], `alone ${i}`);
  const together = await Promise.all(prompts.map((p, i) => complete(daemons.dflash.url, p, 24 + i)));
  for (let i = 0; i < 8; ++i) assert.deepEqual(together[i], expected[i], `together ${i}`);
  assert.match(daemons.dflash.output(), /DFlash drafter/);
  const m = await scrape(daemons.dflash.url);
  const drafted = m.all('deltaserve_spec_decode_num_draft_tokens_per_pos_total').reduce((s, [, v]) => s + v, 0);
  assert.ok(drafted > 0, 'the DFlash daemon drafted');
});

test('bad drafter options are refused at start with a message', async () => {
  for (const [args, message] of [
    [['--drafter', 'dflash'], /--drafter dflash needs --draft-model/],
    [['--drafter', 'eagle'], /--drafter/],
    [['--drafter', 'dflash', '--draft-model', 'models/no-such-drafter'], /no-such-drafter.*config\.json/],
    [['--drafter', 'dflash', '--draft-model', drafter, '--devices', 'cpu:0,cpu:1', '--split', 'layers'], /layer split/],
  ]) {
    const r = spawnSync(daemonBinary(), ['serve', '--port', '0', ...args], { cwd: repoRoot, encoding: 'utf8', timeout: 60000 });
    assert.notEqual(r.status, 0, `${args.join(' ')} must fail`);
    assert.match(r.stdout + r.stderr, message);
  }
});
