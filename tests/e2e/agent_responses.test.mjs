// OpenAI's Responses API (/v1/responses) through the official `openai` client, on the fake
// engine (it echoes the last user message): text and function_call output items, non-streamed
// and streamed with the Responses event sequence, a function-call round trip with
// function_call_output, previous_response_id from the in-memory store, the stored responses
// (retrieve, delete, inputItems.list), and clear 400s for
// what is not offered. Also chat completions' streamed tool_calls deltas right after
// reasoning, with no tool-call XML in `content`. One daemon, many requests.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { startDaemon } from './daemon.mjs';

let daemon;
let client;
const model = 'deltaserve-fake';

before(async () => {
  daemon = await startDaemon({ args: ['--responses-store-entries', '2'] });
  client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'none', maxRetries: 0 });
});

after(async () => {
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, daemon.output());
});

const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'Weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer' } },
    required: ['city'],
  },
}];
const xmlCall = '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n'
  + '<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>';

test('responses.create: a message item, output_text, usage', async () => {
  const r = await client.responses.create({ model, instructions: 'Be brief.', input: 'Hello there', temperature: 0.7 });
  assert.match(r.id, /^resp_[A-Za-z0-9]{24}$/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.temperature, 0.7);  // as sent, not the sampler's float
  assert.equal(r.top_p, 1);
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.deepEqual(r.output[0].content.map((c) => c.type), ['output_text']);
  assert.equal(r.output_text, 'Hello there');
  assert.equal(r.usage.output_tokens, 'Hello there'.length);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.usage.input_tokens_details.cached_tokens, 0);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
});

test('responses.create: max_output_tokens gives status incomplete', async () => {
  const r = await client.responses.create({ model, input: 'abcdef', max_output_tokens: 3 });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.output_text, 'abc');
});

test('responses stream: event sequence for reasoning, text and function calls', async () => {
  const stream = await client.responses.create({
    model, tools, stream: true, reasoning: { effort: 'low' },
    input: [{ role: 'user', content: [{ type: 'input_text', text: `Hmm.\n</think>\n\nSure.\n${xmlCall}` }] }],
  });
  const types = [];
  let text = '';
  let args = '';
  let completed = null;
  const sequence = [];
  for await (const event of stream) {
    types.push(event.type);
    sequence.push(event.sequence_number);
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.function_call_arguments.delta') args += event.delta;
    if (event.type === 'response.completed') completed = event.response;
  }
  const collapsed = types.filter((t, i) => !t.endsWith('.delta') || types[i - 1] !== t);
  assert.deepEqual(collapsed, [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.function_call_arguments.delta',
    'response.function_call_arguments.done', 'response.output_item.done',
    'response.completed',
  ]);
  assert.deepEqual(sequence, sequence.map((_, i) => i));
  assert.equal(text, 'Sure.');
  assert.deepEqual(JSON.parse(args), { city: 'Paris', days: 3 });
  assert.deepEqual(completed.output.map((o) => o.type), ['reasoning', 'message', 'function_call']);
  assert.equal(completed.output[0].content[0].text, 'Hmm.');
  assert.equal(completed.output[2].name, 'get_weather');
  assert.match(completed.output[2].call_id, /^call_/);
  assert.ok(completed.usage.output_tokens_details.reasoning_tokens > 0);
});

test('responses.stream() helper: the SDK accumulates reasoning, text and calls into finalResponse()', async () => {
  const stream = client.responses.stream({
    model, tools, reasoning: { effort: 'low' },
    input: [{ role: 'user', content: [{ type: 'input_text', text: `Hmm.\n</think>\n\nSure.\n${xmlCall}` }] }],
  });
  const final = await stream.finalResponse();
  assert.deepEqual(final.output.map((o) => o.type), ['reasoning', 'message', 'function_call']);
  assert.equal(final.output[0].content[0].text, 'Hmm.');
  assert.equal(final.output_text, 'Sure.');
  assert.deepEqual(JSON.parse(final.output[2].arguments), { city: 'Paris', days: 3 });
});

test('output items keep the generation order (message, function_call, message); the stream agrees', async () => {
  const body = { model, tools, input: `Before.\n${xmlCall}\nAfter.` };
  const r = await client.responses.create(body);
  assert.deepEqual(r.output.map((o) => o.type), ['message', 'function_call', 'message']);
  assert.equal(r.output[0].content[0].text, 'Before.');
  assert.equal(r.output[2].content[0].text, 'After.');
  const streamed = await client.responses.stream(body).finalResponse();
  // The SDK's stream helper adds parsed / parsed_arguments: compare what the server sent.
  const shape = (items) => items.map((o) => [o.type, o.status, o.name, o.arguments, o.content?.map((c) => c.text)]);
  assert.deepEqual(shape(streamed.output), shape(r.output));
  assert.deepEqual(streamed.usage, r.usage);
});

test('function-call round trip with function_call_output, stateless', async () => {
  const first = await client.responses.create({ model, tools, input: xmlCall });
  const call = first.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris', days: 3 });
  const second = await client.responses.create({
    model, tools,
    input: [
      { role: 'user', content: xmlCall },
      ...first.output,
      { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' },
      { role: 'user', content: 'thanks' },
    ],
  });
  assert.equal(second.output_text, 'thanks');
});

test('previous_response_id continues a stored conversation; unknown ids are a 400', async () => {
  const first = await client.responses.create({ model, tools, input: xmlCall });
  const call = first.output.find((o) => o.type === 'function_call');
  const second = await client.responses.create({
    model, tools, previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' },
      { role: 'user', content: 'and tomorrow?' }],
  });
  assert.equal(second.previous_response_id, first.id);
  assert.equal(second.output_text, 'and tomorrow?');
  assert.ok(second.usage.input_tokens > first.usage.input_tokens);
  await assert.rejects(
    client.responses.create({ model, input: 'x', previous_response_id: 'resp_unknown' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id'
      && e.code === 'previous_response_not_found' && /no stored response/.test(e.message));
  // store: false keeps nothing; the store holds 2 entries, so the oldest is evicted.
  const unstored = await client.responses.create({ model, input: 'x', store: false });
  await assert.rejects(client.responses.create({ model, input: 'y', previous_response_id: unstored.id }),
    OpenAI.BadRequestError);
  await client.responses.create({ model, input: 'a' });
  await client.responses.create({ model, input: 'b' });
  await assert.rejects(client.responses.create({ model, input: 'y', previous_response_id: second.id }),
    OpenAI.BadRequestError);
});

test('stored responses: retrieve, inputItems.list (paged), delete; store: false and unknown ids are 404s', async () => {
  const created = await client.responses.create({
    model, tools, instructions: 'Be brief.',
    input: [{ role: 'user', content: 'first' }, { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' }, { role: 'user', content: 'and now?' }],
  });
  const got = await client.responses.retrieve(created.id);
  assert.deepEqual(got, created);  // the same object, output and usage included
  assert.equal(got.output_text, 'and now?');

  const page = await client.responses.inputItems.list(created.id);  // OpenAI's default order: newest first
  assert.equal(page.body.object, 'list');
  assert.deepEqual(page.data.map((i) => i.type), ['message', 'function_call_output', 'function_call', 'message']);
  assert.equal(page.body.first_id, page.data[0].id);
  assert.equal(page.body.last_id, page.data[3].id);
  assert.equal(page.has_more, false);
  assert.deepEqual(page.data[3].content, [{ type: 'input_text', text: 'first' }]);
  assert.equal(page.data[2].call_id, 'call_1');
  assert.equal(new Set(page.data.map((i) => i.id)).size, 4);
  const walked = [];  // the SDK pages with `after` = the last id while has_more
  for await (const item of client.responses.inputItems.list(created.id, { order: 'asc', limit: 1 })) walked.push(item.id);
  assert.deepEqual(walked, page.data.map((i) => i.id).reverse());
  await assert.rejects(client.responses.inputItems.list(created.id, { limit: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'limit');
  // A continuation lists the chain first: the previous items, its output, then its own input.
  const next = await client.responses.create({ model, previous_response_id: created.id, input: 'more' });
  const chain = await client.responses.inputItems.list(next.id, { order: 'asc' });
  assert.deepEqual(chain.data.map((i) => i.id),
    [...page.data.map((i) => i.id).reverse(), created.output[0].id, chain.data[5].id]);
  assert.deepEqual(chain.data[5].content, [{ type: 'input_text', text: 'more' }]);

  await client.responses.delete(created.id);
  for (const call of [() => client.responses.retrieve(created.id), () => client.responses.delete(created.id),
    () => client.responses.inputItems.list(created.id), () => client.responses.retrieve('resp_never')]) {
    await assert.rejects(call(), (e) => e instanceof OpenAI.NotFoundError && e.type === 'invalid_request_error'
      && /not found/.test(e.message));
  }
  await assert.rejects(client.responses.create({ model, input: 'y', previous_response_id: created.id }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'previous_response_not_found');

  const unstored = await client.responses.create({ model, input: 'x', store: false });
  assert.equal(unstored.store, false);
  await assert.rejects(client.responses.retrieve(unstored.id), OpenAI.NotFoundError);
  const streamed = await client.responses.create({ model, input: 'streamed', stream: true });
  let completed = null;
  for await (const event of streamed) if (event.type === 'response.completed') completed = event.response;
  const { output_text: joined, ...stored } = await client.responses.retrieve(completed.id);  // the SDK adds output_text
  assert.equal(joined, 'streamed');
  assert.deepEqual(stored, completed);
  const items = await client.responses.inputItems.list(completed.id);
  assert.deepEqual(items.data.map((i) => [i.role, i.content]), [['user', [{ type: 'input_text', text: 'streamed' }]]]);
});

test('features not offered are a clear 400, and the server keeps serving', async () => {
  const cases = [
    [{ model, input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type', /no hosted tools/],
    [{ model, input: 'x', background: true }, 'background', /not supported/],
    [{ model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] },
      'input[0].content[0].type', /text-only/],
    [{ model, input: [{ type: 'item_reference', id: 'x' }] }, 'input[0].type', /not supported/],
    [{ model, input: 'x', bogus: 1 }, 'bogus', /Unrecognized/],
    [{ model, input: [{ type: 'function_call_output', call_id: 'call_x', output: 'r' }] }, 'input[0].call_id',
      /No tool call found for function call output with call_id 'call_x'/],
  ];
  for (const [body, param, pattern] of cases) {
    await assert.rejects(client.responses.create(body),
      (e) => e instanceof OpenAI.BadRequestError && e.param === param && pattern.test(e.message),
      JSON.stringify(body));
  }
  const r = await client.responses.create({ model, input: 'still here' });
  assert.equal(r.output_text, 'still here');
});

test('chat completions: tool_calls deltas right after reasoning, several calls, no XML in content', async () => {
  const chatTools = [{ type: 'function', function: { name: tools[0].name, parameters: tools[0].parameters } }];
  const jsonCall = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
  const stream = await client.chat.completions.create({
    model, tools: chatTools, stream: true, chat_template_kwargs: { enable_thinking: true },
    messages: [{ role: 'user', content: `Plan.\n</think>\n\n${xmlCall}\n${jsonCall}` }],
  });
  let content = '';
  let reasoning = '';
  const calls = [];
  const finishes = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    reasoning += choice.delta.reasoning_content ?? '';
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id) {
        assert.equal(calls[d.index], undefined);
        calls[d.index] = { id: d.id, name: d.function.name, arguments: '' };
      }
      calls[d.index].arguments += d.function.arguments ?? '';
    }
    if (choice.finish_reason) finishes.push(choice.finish_reason);
  }
  assert.equal(reasoning, 'Plan.');
  assert.equal(content, '');
  assert.deepEqual(finishes, ['tool_calls']);
  assert.equal(calls.length, 2);
  assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris', days: 3 });
  assert.deepEqual(JSON.parse(calls[1].arguments), { city: 'Oslo' });
  assert.notEqual(calls[0].id, calls[1].id);
});
