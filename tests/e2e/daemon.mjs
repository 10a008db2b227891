// Starts the real `deltaserve serve` binary for end-to-end tests: on port 0 (the bound port
// is read from --port-file), with the deterministic fake engine unless told otherwise, and
// stops it with SIGTERM, checking the exit status.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

// The binary under test: $DELTASERVE_BIN (ctest sets it), else the newest
// build/*/cli/deltaserve that was built with the server (`serve --help` succeeds).
export function daemonBinary() {
  if (process.env.DELTASERVE_BIN) return process.env.DELTASERVE_BIN;
  const buildRoot = path.join(repoRoot, 'build');
  const candidates = existsSync(buildRoot)
    ? readdirSync(buildRoot)
        .map((d) => path.join(buildRoot, d, 'cli', 'deltaserve'))
        .filter((p) => existsSync(p))
    : [];
  candidates.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const found = candidates.find((p) => spawnSync(p, ['serve', '--help'], { stdio: 'ignore' }).status === 0);
  if (!found) throw new Error('no deltaserve binary with the server: build one or set DELTASERVE_BIN');
  return found;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Starts a daemon. `args` are extra flags; `fake` (default true) adds --fake-engine;
// `waitReady` (default true) waits for GET /ready == 200; `maxFds` runs it under
// `ulimit -n maxFds` (through bash, which then execs the daemon: the pid is the daemon's).
export async function startDaemon({ args = [], fake = true, waitReady = true, maxFds = 0 } = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), 'deltaserve-e2e-'));
  const portFile = path.join(dir, 'port');
  const fullArgs = ['serve', '--port', '0', '--port-file', portFile];
  if (!args.includes('--log-level')) fullArgs.push('--log-level', 'warn');
  if (fake) fullArgs.push('--fake-engine');
  fullArgs.push(...args);
  const proc = maxFds > 0
    ? spawn('bash', ['-c', `ulimit -n ${maxFds} && exec "$0" "$@"`, daemonBinary(), ...fullArgs],
            { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(daemonBinary(), fullArgs, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout.on('data', (d) => (output += d));
  proc.stderr.on('data', (d) => (output += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));

  let port = 0;
  for (let i = 0; i < 200 && !port; ++i) {
    if (proc.exitCode !== null) break;
    if (existsSync(portFile)) port = Number(readFileSync(portFile, 'utf8').trim());
    else await sleep(25);
  }
  if (!port) {
    proc.kill('SIGKILL');
    throw new Error(`daemon did not start:\n${output}`);
  }
  const url = `http://127.0.0.1:${port}`;
  const daemon = {
    url,
    port,
    proc,
    output: () => output,
    dir,
    // SIGTERM (unless the test sent one), then the exit status ({code, signal}); SIGKILL
    // after `timeoutMs`.
    async stop(timeoutMs = 20000) {
      // One SIGTERM only: a second one during the drain forces the exit (status 143).
      if (proc.exitCode === null && !proc.killed) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      const status = await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      return status;
    },
    exited,
  };
  if (waitReady) {
    for (let i = 0; ; ++i) {
      const res = await fetch(`${url}/ready`).catch(() => null);
      if (res && res.status === 200) break;
      if (i > 400) throw new Error(`daemon never became ready:\n${output}`);
      await sleep(25);
    }
  }
  return daemon;
}

// Parses Prometheus text into {name{labels}: value} plus a helper to read one series.
export function parseMetrics(text) {
  const values = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    values.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return {
    values,
    // The value of `name` whose labels contain every `label="value"` given (first match).
    get(name, labels = {}) {
      for (const [key, value] of values) {
        const brace = key.indexOf('{');
        const base = brace < 0 ? key : key.slice(0, brace);
        if (base !== name) continue;
        if (Object.entries(labels).every(([k, v]) => key.includes(`${k}="${v}"`))) return value;
      }
      return undefined;
    },
    // Every series of `name`, as [labels text, value].
    all(name) {
      return [...values].filter(([key]) => key === name || key.startsWith(`${name}{`));
    },
  };
}

export async function scrape(url) {
  const res = await fetch(`${url}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return parseMetrics(await res.text());
}

// Reads a raw SSE response body into its `data:` payloads (strings), in order. Comment
// events (": keep-alive") are skipped, as SSE clients do.
export async function readSse(response) {
  const text = await response.text();
  const events = text.split('\n\n').filter((e) => e.length > 0 && !e.startsWith(':'));
  return events.map((e) => {
    if (!e.startsWith('data: ')) throw new Error(`not an SSE data event: ${JSON.stringify(e)}`);
    return e.slice('data: '.length);
  });
}

export { sleep };
