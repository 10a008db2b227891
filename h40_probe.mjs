import { startDaemon } from './tests/e2e/daemon.mjs';
const d = await startDaemon({ args: ['--http-threads', '2'] });
const post = (body) => fetch(`${d.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
const small = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
const big = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"hi"}],"metadata":'), Buffer.alloc(8_000_000, '[ ')]);
const valid = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(7_900_000) }], max_tokens: 1 }));
const bad = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"hi"}],"metadata":'), Buffer.from('['.repeat(200)), Buffer.alloc(7_999_000, ' ')]);
for (const [name, body] of [['small', small], ['bomb', big], ['bomb', big], ['200deep+spaces', bad], ['8MB string', valid], ['small', small]]) {
  const t = performance.now(); const r = await post(body); await r.text(); console.log(name, r.status, (performance.now() - t).toFixed(1), 'ms');
}
await d.stop();
