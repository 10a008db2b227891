// Starts the real `deltaserve serve` for the deploy checks and the chat-page test: port 0
// (the bound port comes back through --port-file), waits for GET /ready, stops with SIGTERM.
//
// The binary: $DELTASERVE_BIN, else $DELTASERVE_BUILD_DIR/cli/deltaserve, else
// build/release/cli/deltaserve (ctest sets one of the first two).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export function daemonBinary() {
  if (process.env.DELTASERVE_BIN) return process.env.DELTASERVE_BIN;
  const buildDir = process.env.DELTASERVE_BUILD_DIR || path.join(repoRoot, 'build', 'release');
  const binary = path.join(buildDir, 'cli', 'deltaserve');
  if (!existsSync(binary)) throw new Error(`no daemon binary at ${binary}: build it or set DELTASERVE_BIN`);
  return binary;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// `args`: extra `serve` flags. Resolves once /ready answers 200 (or throws with the log).
export async function startDaemon(args = [], { readyTimeoutMs = 60000 } = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), 'deltaserve-deploy-'));
  const portFile = path.join(dir, 'port');
  const proc = spawn(daemonBinary(),
                     ['serve', '--port', '0', '--port-file', portFile, '--log-level', 'warn', ...args],
                     { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));

  const daemon = {
    proc,
    log: () => log,
    url: '',
    // SIGTERM (the drain), then SIGKILL after `timeoutMs`; resolves to {code, signal}.
    async stop(timeoutMs = 20000) {
      // One SIGTERM only: a second one during the drain forces the exit (status 143).
      if (proc.exitCode === null && proc.signalCode === null && !proc.killed) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      const status = await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      return status;
    },
  };
  try {
    const deadline = Date.now() + readyTimeoutMs;
    let port = 0;
    while (!port) {
      if (proc.exitCode !== null || Date.now() > deadline) throw new Error('the daemon did not start');
      if (existsSync(portFile)) port = Number(readFileSync(portFile, 'utf8').trim());
      else await sleep(20);
    }
    daemon.url = `http://127.0.0.1:${port}`;
    for (;;) {
      const res = await fetch(`${daemon.url}/ready`).catch(() => null);
      if (res && res.status === 200) break;
      if (proc.exitCode !== null || Date.now() > deadline) throw new Error('the daemon never became ready');
      await sleep(50);
    }
  } catch (e) {
    await daemon.stop(2000);
    throw new Error(`${e.message}\n--- daemon log ---\n${log}`);
  }
  return daemon;
}
