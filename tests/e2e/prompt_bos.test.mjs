// Prompt ids of /tokenize and /v1/completions on the real engine equal Hugging Face's
// tokenizer (its transformers.js port, @lenml/tokenizers, on the model's own tokenizer.json
// and tokenizer_config.json) for the embedded GGUF, which carries a bos id (<|endoftext|>)
// and tokenizer.ggml.add_bos_token = false: no start token in front. A copy of the GGUF with
// add_bos_token = true gets the start token in front, as llama.cpp does.
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { TokenizerLoader } from '@lenml/tokenizers';

import { startDaemon } from './daemon.mjs';

const GGUF = 'models/deltaserve-tiny-moe.gguf';
const HF_DIR = 'models/deltaserve-tiny-moe-hf';
const BOS = 5627;  // <|endoftext|>, tokenizer.ggml.bos_token_id of the embedded model
const PROMPTS = ['Hello, world!', 'def fibonacci(n):\n    return n', 'The quick brown fox', '  two  spaces\n\nand lines',
                 'caf\u00e9 \u4f60\u597d <think>x</think>'];

const hf = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(path.join(HF_DIR, 'tokenizer.json'), 'utf8')),
  tokenizerConfig: JSON.parse(readFileSync(path.join(HF_DIR, 'tokenizer_config.json'), 'utf8')),
});
const hfIds = (text) => Array.from(hf.encode(text, { add_special_tokens: true }));

// A copy of the GGUF with tokenizer.ggml.add_bos_token (a bool, one byte after the key and
// its u32 type 7) set to `value`.
function ggufWithAddBos(dir, value) {
  const bytes = readFileSync(GGUF);
  const key = Buffer.from('tokenizer.ggml.add_bos_token');
  const at = bytes.indexOf(key);
  assert.ok(at > 0, 'the embedded GGUF carries tokenizer.ggml.add_bos_token');
  assert.equal(bytes.readUInt32LE(at + key.length), 7, 'a bool');
  bytes[at + key.length + 4] = value ? 1 : 0;
  const file = path.join(dir, `add_bos_${value}.gguf`);
  writeFileSync(file, bytes);
  return file;
}

let dir;
const daemons = {};

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'deltaserve-bos-'));
  copyFileSync(GGUF, path.join(dir, 'plain.gguf'));
  const models = { plain: path.join(dir, 'plain.gguf'), off: ggufWithAddBos(dir, false), on: ggufWithAddBos(dir, true) };
  for (const [name, model] of Object.entries(models)) {
    daemons[name] = await startDaemon({ fake: false, args: ['--model', model, '--max-streams', '2', '--context-tokens', '256',
                                                             '--draft-depth', '0'] });
  }
});

after(async () => {
  for (const d of Object.values(daemons)) assert.deepEqual(await d.stop(), { code: 0, signal: null }, d.output());
  rmSync(dir, { recursive: true, force: true });
});

async function post(daemon, route, body) {
  const res = await fetch(`${daemon.url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = await res.json();
  assert.equal(res.status, 200, JSON.stringify(json));
  return json;
}

async function completion(daemon, prompt) {
  const r = await post(daemon, '/v1/completions', { prompt, max_tokens: 6, temperature: 0 });
  return { text: r.choices[0].text, promptTokens: r.usage.prompt_tokens };
}

for (const [name, addBos] of [['plain', false], ['off', false], ['on', true]]) {
  test(`add_bos_token ${name === 'plain' ? 'as shipped (false)' : addBos}: prompt ids`, async () => {
    const daemon = daemons[name];
    for (const text of PROMPTS) {
      const expected = addBos ? [BOS, ...hfIds(text)] : hfIds(text);
      assert.deepEqual((await post(daemon, '/tokenize', { prompt: text })).tokens, expected, text);
      // add_special_tokens = false never adds it.
      assert.deepEqual((await post(daemon, '/tokenize', { prompt: text, add_special_tokens: false })).tokens,
                       hfIds(text), text);
      // /v1/completions tokenizes the same way: the prompt count matches, and greedy output
      // from the text equals greedy output from the expected ids.
      const fromText = await completion(daemon, text);
      const fromIds = await completion(daemon, expected);
      assert.equal(fromText.promptTokens, expected.length, text);
      assert.equal(fromText.text, fromIds.text, text);
    }
  });
}
