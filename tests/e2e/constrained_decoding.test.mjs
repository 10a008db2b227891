// Constrained decoding end to end: the daemon on the embedded model (CPU engine) and the
// official openai client. The tiny model's free output is nonsense, so only the grammar can
// make these outputs valid: forced tool calls (tool_choice "required" and a named function)
// whose arguments satisfy the tool's schema, exactly one with parallel_tool_calls false and one
// or more with it true (OpenAI's default), and response_format json_schema output that
// validates, 100 times in 100 each at temperature 1.0. Streamed calls arrive as OpenAI's
// fragments (id and name first, then argument pieces). Bad schemas get a 400 and the server
// keeps serving. A thinking budget (chat's thinking_token_budget, /v1/messages' budget_tokens)
// closes the reasoning once spent. Forced calls of a tool with format uri / uri-reference work
// on chat, responses and messages; an unknown format is a 400 only with strict: true.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { isIPv6 } from 'node:net';
import OpenAI from 'openai';

import { startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
const kRuns = 100;
const kConcurrency = 16;
let daemon;
let client;

before(async () => {
  // The embedded model's template (Qwen3.5's) thinks by default, and free reasoning can use up
  // max_tokens before the constrained answer starts: requests here reason only when they ask.
  daemon = await startDaemon({ fake: false, args: ['--max-streams', '16', '--context-tokens', '2048',
    '--default-chat-template-kwargs', '{"enable_thinking": false}'] });
  client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'none', maxRetries: 0 });
});

after(async () => {
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, daemon.output());
});

// An independent validator of the schema subset the server accepts (objects in any order,
// unlike the grammar, which writes them in schema order).
function validate(schema, value, defs = schema.$defs ?? {}, path = '$') {
  if (schema.$ref) return validate(defs[schema.$ref.replace('#/$defs/', '')], value, defs, path);
  if ('const' in schema) return assert.deepEqual(value, schema.const, path);
  if (schema.enum) return assert.ok(schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)), `${path}: ${JSON.stringify(value)} not in enum`);
  if (schema.anyOf) {
    const ok = schema.anyOf.some((s) => { try { validate(s, value, defs, path); return true; } catch { return false; } });
    return assert.ok(ok, `${path}: ${JSON.stringify(value)} matches no anyOf branch`);
  }
  const types = [schema.type].flat();
  const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
  const t = typeOf(value);
  assert.ok(types.includes(t) || (t === 'integer' && types.includes('number')), `${path}: ${JSON.stringify(value)} is not ${types}`);
  if (t === 'object') {
    for (const r of schema.required ?? []) assert.ok(r in value, `${path}: missing ${r}`);
    for (const [k, v] of Object.entries(value)) {
      assert.ok(schema.properties && k in schema.properties, `${path}: unexpected property ${k}`);
      validate(schema.properties[k], v, defs, `${path}.${k}`);
    }
  }
  if (t === 'array') {
    value.forEach((v, i) => validate(schema.items, v, defs, `${path}[${i}]`));
    assert.ok(value.length >= (schema.minItems ?? 0) && value.length <= (schema.maxItems ?? Infinity), `${path}: ${value.length} items`);
  }
  if (t === 'string') {
    const length = [...value].length;  // code points
    assert.ok(length >= (schema.minLength ?? 0) && length <= (schema.maxLength ?? Infinity), `${path}: length ${length}`);
    if (schema.pattern) assert.match(value, new RegExp(schema.pattern, 'u'), path);
    if (schema.format) assert.ok(checkFormat(schema.format, value), `${path}: ${value} is not a ${schema.format}`);
  }
  if (t === 'integer' || t === 'number') {
    assert.ok(value >= (schema.minimum ?? -Infinity) && value <= (schema.maximum ?? Infinity), `${path}: ${value}`);
    assert.ok(value > (schema.exclusiveMinimum ?? -Infinity) && value < (schema.exclusiveMaximum ?? Infinity), `${path}: ${value}`);
    // Math.abs: a negative multiple leaves -0. Past 2^53 the parsed double is not the model's
    // integer (the grammar allows 16 digits): the value-keyword test checks those on the text.
    if (schema.multipleOf && Number.isSafeInteger(value)) {
      assert.equal(Math.abs(value % schema.multipleOf), 0, `${path}: ${value} is not a multiple of ${schema.multipleOf}`);
    }
  }
}

// Shape checks of the formats the value-keyword test uses (the unit tests check them fully).
const formatChecks = {
  date: /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/,
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  ipv4: /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/,
};

// RFC 3986 (sections 3 and 4.2) as regular expressions written from its ABNF, IP literals
// checked by node:net: independent of the server's grammar.
const uriChar = (extra) => `(?:[A-Za-z0-9\\-._~!$&'()*+,;=${extra}]|%[0-9A-Fa-f]{2})`;
const uriAuthority = `//(?:${uriChar(':')}*@)?(?:\\[([^\\]]*)\\]|${uriChar('')}*)(?::\\d*)?(?:/${uriChar(':@')}*)*`;
const uriAbsolutePath = `/(?:${uriChar(':@')}+(?:/${uriChar(':@')}*)*)?`;
const uriTail = `(?:\\?${uriChar(':@/?')}*)?(?:#${uriChar(':@/?')}*)?`;
const uriPattern = new RegExp(`^[A-Za-z][A-Za-z0-9+.-]*:(?:${uriAuthority}|${uriAbsolutePath}|${uriChar(':@')}+(?:/${uriChar(':@')}*)*|)${uriTail}$`);
const relativeRefPattern = new RegExp(`^(?:${uriAuthority}|${uriAbsolutePath}|${uriChar('@')}+(?:/${uriChar(':@')}*)*|)${uriTail}$`);
function isUri(text, reference) {
  const m = uriPattern.exec(text) ?? (reference ? relativeRefPattern.exec(text) : null);
  return m !== null && (m[1] === undefined || isIPv6(m[1]));
}

// An unknown format is an annotation (the server constrains nothing for it without strict).
function checkFormat(format, value) {
  if (format === 'uri' || format === 'uri-reference') return isUri(value, format === 'uri-reference');
  return format in formatChecks ? formatChecks[format].test(value) : true;
}

const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
    days: { type: 'integer' },
    units: { type: 'string', enum: ['metric', 'imperial'] },
    detail: {
      type: 'object',
      properties: { wind: { type: 'boolean' }, level: { anyOf: [{ type: 'integer' }, { type: 'null' }] } },
      required: ['wind', 'level'],
      additionalProperties: false,
    },
  },
  required: ['city', 'days', 'detail'],
  additionalProperties: false,
};
const alarmParams = {
  type: 'object',
  // No free-text parameter: a raw value ends only when the model writes '<', which a tiny
  // model may put off past max_tokens (the grammar unit tests cover free text).
  properties: { hour: { type: 'integer' }, loud: { type: 'boolean' }, tone: { type: 'string', enum: ['beep', 'chime'] } },
  required: ['hour', 'loud'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: weatherParams } },
  { type: 'function', function: { name: 'set_alarm', description: 'Sets an alarm', parameters: alarmParams } },
];
const paramsOf = { get_weather: weatherParams, set_alarm: alarmParams };

// No array and no free string: the grammar keeps every byte valid, but only the model decides
// when an array or a string ends, and the tiny model repeats items past max_tokens (arrays
// and free text are covered by tests/grammar and tests/server/output_constraint_test).
const answerSchema = {
  type: 'object',
  properties: {
    verdict: { type: 'string', enum: ['yes', 'no', 'maybe'] },
    score: { type: 'number' },
    flag: { type: 'boolean' },
    item: { $ref: '#/$defs/item' },
    extra: { anyOf: [{ type: 'null' }, { const: 'none' }] },
  },
  required: ['verdict', 'score', 'flag', 'item', 'extra'],
  additionalProperties: false,
  $defs: {
    item: {
      type: 'object',
      properties: { kind: { type: 'string', enum: ['a', 'b'] }, count: { type: 'integer' }, ok: { type: ['boolean', 'null'] } },
      required: ['kind', 'count', 'ok'],
      additionalProperties: false,
    },
  },
};

async function runMany(make, runs = kRuns) {
  const results = [];
  for (let i = 0; i < runs; i += kConcurrency) {
    const batch = [];
    for (let j = i; j < Math.min(runs, i + kConcurrency); ++j) batch.push(make(j));
    results.push(...(await Promise.all(batch)));
  }
  return results;
}

const messages = (j) => [{ role: 'user', content: `Request number ${j}: what now?` }];

test('tool_choice required, parallel_tool_calls false: one well-formed call of some tool, arguments valid, 100 of 100', async () => {
  const replies = await runMany((j) => client.chat.completions.create({
    model, tools, tool_choice: 'required', parallel_tool_calls: false, temperature: 1.0, max_tokens: 400, messages: messages(j),
  }));
  for (const r of replies) {
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    for (const call of choice.message.tool_calls) {
      assert.ok(call.function.name in paramsOf, call.function.name);
      validate(paramsOf[call.function.name], JSON.parse(call.function.arguments));
    }
  }
});

// A streamed chat completion gathered as the SDK's users do: tool_calls deltas joined by index.
async function gatherStream(request) {
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? '';
    for (const t of c.delta?.tool_calls ?? []) {
      if (t.id) {
        assert.equal(t.index, calls.length, 'a new call takes the next index');
        assert.equal(t.type, 'function');
        calls.push({ id: t.id, function: { name: t.function.name, arguments: '' }, fragments: 0 });
      } else {
        assert.equal(t.index, calls.length - 1, 'fragments continue the last call');
        assert.equal(t.function?.name, undefined, 'only the first delta names the call');
      }
      calls[t.index].function.arguments += t.function?.arguments ?? '';
      calls[t.index].fragments += 1;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { choices: [{ finish_reason: finish, message: { content: content || null, tool_calls: calls } }] };
}

test('a named tool, parallel_tool_calls false: exactly that call, arguments valid, 100 of 100 (streamed in fragments too)', async () => {
  const replies = await runMany(async (j) => {
    const request = {
      model, tools, tool_choice: { type: 'function', function: { name: 'set_alarm' } }, parallel_tool_calls: false,
      temperature: 1.0, max_tokens: 400, messages: messages(j),
    };
    return j % 4 === 0 ? gatherStream(request) : client.chat.completions.create(request);
  });
  let streamed = 0;
  for (const r of replies) {
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    assert.equal(choice.message.tool_calls[0].function.name, 'set_alarm');
    validate(alarmParams, JSON.parse(choice.message.tool_calls[0].function.arguments));
    if (choice.message.tool_calls[0].fragments !== undefined) {
      // The arguments came as the model wrote them: "{", each parameter's pieces, "}".
      assert.ok(choice.message.tool_calls[0].fragments >= 3, JSON.stringify(choice.message.tool_calls[0]));
      streamed += 1;
    }
  }
  assert.equal(streamed, 25);
});

// parallel_tool_calls true (the default): one or more calls; the model decides when the list
// ends, so a reply that ran into max_tokens may end in a cut call (closed, not validated).
test('parallel_tool_calls (default): required and a named tool give one or more valid calls, 48 of 48 each', async () => {
  for (const [choiceOf, names] of [['required', Object.keys(paramsOf)],
    [{ type: 'function', function: { name: 'set_alarm' } }, ['set_alarm']]]) {
    const replies = await runMany(async (j) => {
      const request = { model, tools, tool_choice: choiceOf, temperature: 1.0, max_tokens: 200, messages: messages(j) };
      return j % 4 === 0 ? gatherStream(request) : client.chat.completions.create(request);
    }, 48);
    let several = 0;
    for (const r of replies) {
      const choice = r.choices[0];
      assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), JSON.stringify(choice));
      // The output is calls only: a call cut before its name is known is dropped, never
      // given back as content (no markup reaches the text).
      assert.equal(choice.message.content, null, JSON.stringify(choice));
      const calls = choice.message.tool_calls;
      assert.ok(calls.length >= 1, JSON.stringify(choice));
      const complete = choice.finish_reason === 'length' ? calls.slice(0, -1) : calls;
      if (choice.finish_reason === 'tool_calls') assert.ok(complete.length >= 1);
      for (const call of calls) assert.ok(names.includes(call.function.name), call.function.name);
      for (const call of complete) validate(paramsOf[call.function.name], JSON.parse(call.function.arguments));
      if (calls.length >= 2) several += 1;
    }
    assert.ok(several > 0, `no reply with several calls for ${JSON.stringify(choiceOf)}`);
  }
});

test('response_format json_schema: the content parses and validates, 100 of 100', async () => {
  const replies = await runMany((j) => client.chat.completions.create({
    model, temperature: 1.0, max_tokens: 400, messages: messages(j),
    response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema: answerSchema } },
  }));
  for (const r of replies) {
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'stop', JSON.stringify(choice));
    validate(answerSchema, JSON.parse(choice.message.content));
  }
});

test('response_format json_schema with value keywords (bounds, multipleOf, lengths, pattern, format) validates, 32 of 32', async () => {
  const schema = {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[A-Z]{3}-\\d{2}$' },
      note: { type: 'string', pattern: 'ok', maxLength: 6 },
      when: { type: 'string', format: 'date' },
      id: { type: 'string', format: 'uuid' },
      host: { type: 'string', format: 'ipv4' },
      count: { type: 'integer', minimum: 3, maximum: 17 },
      step: { type: 'integer', multipleOf: 15 },
      ratio: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      tags: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 4 }, minItems: 1, maxItems: 3 },
    },
    required: ['code', 'note', 'when', 'id', 'host', 'count', 'step', 'ratio', 'tags'],
    additionalProperties: false,
  };
  const replies = await runMany((j) => client.chat.completions.create({
    model, temperature: 1.0, max_tokens: 400, messages: messages(j),
    response_format: { type: 'json_schema', json_schema: { name: 'record', strict: true, schema } },
  }), 32);
  for (const r of replies) {
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'stop', JSON.stringify(choice));
    validate(schema, JSON.parse(choice.message.content));
    const step = /"step"\s*:\s*(-?\d+)/.exec(choice.message.content);
    assert.equal(BigInt(step[1]) % 15n, 0n, `step ${step[1]} is not a multiple of 15`);
  }
});

test('response_format json_object, and json_schema with reasoning on (constrained after </think>)', async () => {
  const obj = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 400, messages: messages(0), response_format: { type: 'json_object' },
  });
  const text = obj.choices[0].message.content;
  assert.ok(text.startsWith('{'), text);
  if (obj.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  const r = await client.chat.completions.create({
    model, temperature: 0.7, max_tokens: 600, messages: messages(1), chat_template_kwargs: { enable_thinking: true },
    response_format: { type: 'json_schema', json_schema: { name: 'ok', schema } },
  });
  const choice = r.choices[0];
  // The reasoning was free (it may run to the limit); once it ended, the answer is the schema's.
  if (choice.message.reasoning_content !== undefined && choice.finish_reason === 'stop') {
    validate(schema, JSON.parse(choice.message.content));
  }
});

test('bad schemas: a clear 400 naming the field, and the server keeps serving', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(a)\\1' } } } }, 'response_format.json_schema.schema', /pattern.*backreference/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string' } }, required: ['b'] } } } }, 'response_format.json_schema.schema', /required/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema', /./],
    [{ response_format: { type: 'xml' } }, 'response_format.type', /xml/],
    [{ tool_choice: 'required', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'number', multipleOf: 0.25 } } } } }] }, 'tools', /multipleOf/],
    [{ tool_choice: 'required', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'array' } } }] }, 'tools', /object/],
  ];
  for (const [extra, param, message] of cases) {
    await assert.rejects(
      client.chat.completions.create({ model, max_tokens: 5, messages: messages(0), ...extra }),
      (err) => {
        assert.equal(err.status, 400, JSON.stringify(extra));
        assert.equal(err.error?.param ?? err.param, param, JSON.stringify(err.error));
        assert.match(err.message, message);
        return true;
      },
    );
  }
  const ok = await client.chat.completions.create({ model, max_tokens: 5, temperature: 0, messages: messages(0) });
  assert.ok(ok.choices[0].message.content !== undefined);
});

test('thinking budget: chat closes the reasoning after thinking_token_budget tokens', async () => {
  const ask = (extra) => client.chat.completions.create({
    model, max_tokens: 64, temperature: 0, messages: messages(0), chat_template_kwargs: { enable_thinking: true }, ...extra,
  });
  const free = await ask({});
  const r = await ask({ thinking_token_budget: 3 });
  // Greedy: the budgeted reasoning is the free reasoning's first 3 tokens, then the close.
  const cut = r.choices[0].message.reasoning_content;
  const whole = free.choices[0].message.reasoning_content;
  assert.ok(cut.length > 0 && cut.length < whole.length && whole.startsWith(cut), `${JSON.stringify(cut)} / ${JSON.stringify(whole)}`);
  // Its tokens are the budget's plus the close's ("\n</think>\n\n"; the tiny model's
  // tokenizer marks </think> special, so the close is spelled in byte tokens).
  const reasoning = r.usage.completion_tokens_details.reasoning_tokens;
  assert.ok(reasoning <= 3 + 11, JSON.stringify(r.usage));
  assert.ok(reasoning < free.usage.completion_tokens_details.reasoning_tokens, JSON.stringify([r.usage, free.usage]));
});

test('thinking budget: /v1/messages checks budget_tokens and bounds the thinking block', async () => {
  const post = (body) => fetch(`${daemon.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Think about prime numbers.' }], ...body }),
  });
  for (const [body, message] of [
    [{ max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 1000 } }, /1024/],
    [{ max_tokens: 1500, thinking: { type: 'enabled', budget_tokens: 1500 } }, /max_tokens/],
    [{ max_tokens: 1500, thinking: { type: 'enabled' } }, /budget_tokens/],
  ]) {
    const res = await post(body);
    assert.equal(res.status, 400, JSON.stringify(body));
    const error = await res.json();
    assert.equal(error.type, 'error');
    assert.equal(error.error.type, 'invalid_request_error');
    assert.match(error.error.message, message);
  }
  // The tiny model closes its reasoning well within 1024 tokens: this checks that a budgeted
  // request runs and stays in bounds (the budget's effect is the chat test's above).
  const res = await post({ max_tokens: 1100, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 } });
  assert.equal(res.status, 200);
  const m = await res.json();
  assert.equal(m.content[0].type, 'thinking');
  const ids = await fetch(`${daemon.url}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: m.content[0].thinking, add_special_tokens: false }),
  }).then((r) => r.json());
  assert.ok(ids.tokens.length <= 1024 + 1, `${ids.tokens.length} thinking tokens`);
  // The reasoning was closed: the answer began (text, or the end of the turn) within max_tokens.
  assert.ok(m.stop_reason === 'end_turn' || m.content.some((b) => b.type === 'text'), JSON.stringify(m).slice(0, 500));
});

// MCP tools often carry format uri; a forced call of one used to be a 400 on every API.
const linkParams = {
  type: 'object',
  properties: {
    url: { type: 'string', format: 'uri' },
    base: { type: 'string', format: 'uri-reference' },
    mode: { type: 'string', enum: ['get', 'head'], format: 'x-annotation' },  // unknown: constrains nothing
  },
  required: ['url', 'base', 'mode'],
  additionalProperties: false,
};

async function postMessages(body) {
  const res = await fetch(`${daemon.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 300, messages: [{ role: 'user', content: 'Open the link.' }], ...body }),
  });
  return { status: res.status, body: await res.json() };
}

test('format uri / uri-reference in forced calls on chat, responses and messages: the URIs validate', async () => {
  const kEach = 16;
  const chat = await runMany((j) => client.chat.completions.create({
    model, temperature: 1.0, max_tokens: 300, messages: messages(j), parallel_tool_calls: false,
    tools: [{ type: 'function', function: { name: 'open_link', parameters: linkParams } }],
    tool_choice: { type: 'function', function: { name: 'open_link' } },
  }), kEach);
  const responses = await runMany((j) => client.responses.create({
    model, temperature: 1.0, max_output_tokens: 300, input: `Request number ${j}: open it.`, parallel_tool_calls: false,
    tools: [{ type: 'function', name: 'open_link', parameters: linkParams, strict: false }], tool_choice: 'required',
  }), kEach);
  const anthropic = await runMany(() => postMessages({
    temperature: 1.0, tools: [{ name: 'open_link', input_schema: linkParams }],
    tool_choice: { type: 'tool', name: 'open_link', disable_parallel_tool_use: true },
  }), kEach);
  const args = [];  // the calls the model finished (a tiny model may run a URI into max_tokens)
  for (const r of chat) {
    if (r.choices[0].finish_reason === 'tool_calls') args.push(r.choices[0].message.tool_calls[0].function.arguments);
  }
  for (const r of responses) {
    if (r.status === 'completed') args.push(r.output.find((o) => o.type === 'function_call').arguments);
  }
  for (const r of anthropic) {
    assert.equal(r.status, 200, JSON.stringify(r.body));
    if (r.body.stop_reason === 'tool_use') args.push(JSON.stringify(r.body.content.find((b) => b.type === 'tool_use').input));
  }
  for (const a of args) validate(linkParams, JSON.parse(a));
  // The tiny model ends nearly every URI well within max_tokens (47 of 48 when this was written).
  assert.ok(args.length >= 2 * kEach, `${args.length} of ${3 * kEach} calls finished`);
});

test('an unknown format: a 400 naming it with strict: true, an annotation without (chat, responses, messages)', async () => {
  const strictTool = { type: 'function', function: { name: 'open_link', strict: true, parameters: linkParams } };
  await assert.rejects(client.chat.completions.create({
    model, max_tokens: 300, messages: messages(0), tools: [strictTool], tool_choice: 'required',
  }), (e) => e.status === 400 && e.param === 'tools' && /'x-annotation' is not supported in strict mode/.test(e.message));
  const strictSchema = { type: 'object', properties: { v: { type: 'string', format: 'iri' } }, required: ['v'], additionalProperties: false };
  await assert.rejects(client.responses.create({
    model, max_output_tokens: 50, input: 'x',
    text: { format: { type: 'json_schema', name: 'v', strict: true, schema: strictSchema } },
  }), (e) => e.status === 400 && e.param === 'text.format.schema' && /'iri'/.test(e.message));
  const refused = await postMessages({
    tools: [{ name: 'open_link', strict: true, input_schema: linkParams }], tool_choice: { type: 'any' },
  });
  assert.equal(refused.status, 400);
  assert.equal(refused.body.type, 'error');
  assert.match(refused.body.error.message, /'x-annotation' is not supported in strict mode/);
  // Without strict the same schema runs (the format constrains nothing).
  const r = await client.responses.create({
    model, max_output_tokens: 50, temperature: 0, input: 'x',
    text: { format: { type: 'json_schema', name: 'v', schema: { ...strictSchema, properties: { v: { type: 'string', format: 'iri', enum: ['a', 'b'] } } } } },
  });
  assert.equal(r.status, 'completed');
  assert.ok(['a', 'b'].includes(JSON.parse(r.output_text).v), r.output_text);
});
