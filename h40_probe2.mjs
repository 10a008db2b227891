import { readFileSync } from 'node:fs';
import net from 'node:net';
import { startDaemon } from './tests/e2e/daemon.mjs';
const cpu = (pid) => { const s = readFileSync(`/proc/${pid}/stat`, 'utf8'); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return (Number(f[11]) + Number(f[12])) / 100; };
const d = await startDaemon({ args: ['--http-threads', '2'] });
const body = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"hi"}],"metadata":'), Buffer.alloc(8_000_000, '[ ')]);
const head = Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n`);
for (let i = 0; i < 3; ++i) {
  const c0 = cpu(d.proc.pid); const n0 = process.cpuUsage();
  const t = performance.now();
  const answer = await new Promise((resolve) => { const s = net.connect(d.port, '127.0.0.1'); let data = ''; s.on('data', (x) => data += x); s.on('close', () => resolve(data)); s.on('error', () => resolve(data)); s.write(Buffer.concat([head, body])); });
  const n1 = process.cpuUsage(n0);
  console.log(answer.slice(0, 12), (performance.now() - t).toFixed(1), 'ms; daemon cpu', (cpu(d.proc.pid) - c0).toFixed(2), 's; node cpu', ((n1.user + n1.system) / 1e6).toFixed(2));
}
await d.stop();
