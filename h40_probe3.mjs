import { spawn } from 'node:child_process';
import net from 'node:net';
import { startDaemon, sleep } from './tests/e2e/daemon.mjs';
const d = await startDaemon({ args: ['--http-threads', '2'] });
const perf = spawn('perf', ['record', '-g', '-o', '/tmp/h40_perf.data', '-p', String(d.proc.pid)], { stdio: 'inherit' });
await sleep(1000);
const body = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"hi"}],"metadata":'), Buffer.alloc(8_000_000, '[ ')]);
const head = Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n`);
for (let i = 0; i < 5; ++i) {
  await new Promise((resolve) => { const s = net.connect(d.port, '127.0.0.1'); s.on('data', () => {}); s.on('close', resolve); s.on('error', resolve); s.write(Buffer.concat([head, body])); });
}
perf.kill('SIGINT');
await new Promise((r) => perf.on('exit', r));
await d.stop();
