// Checks deploy/docker/Dockerfile.* without a container engine (none runs in CI):
//   1. syntax and semantics with dockerfile-utils' validator (the VS Code Docker linter):
//      unknown instructions and flags, bad HEALTHCHECK durations, invalid stage names, ...;
//   2. the project's rules, most of them hadolint's (DLxxxx in the messages): multi-stage
//      with a named build stage, pinned base tags, non-root USER in the final stage, a
//      HEALTHCHECK on /health, exec-form ENTRYPOINT, apt-get hygiene, pipefail before pipes;
//   3. the build inputs exist: the CMake options passed, the files installed, the
//      Dockerfile-specific .dockerignore, and it keeps those files in the context.
// When hadolint is on PATH it runs as well (Debian 12 does not package it).
//
// Usage: node tests/deploy/dockerfile_check.mjs [Dockerfile ...]   (exit 1 on problems)
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { validate, ValidationSeverity } from 'dockerfile-utils';

import { repoRoot } from './daemon_process.mjs';

const problems = [];

// Instructions with their line numbers; continuation lines joined, comments dropped (a
// `# hadolint ignore=...` comment is kept as an attribute of the next instruction).
function parse(text) {
  const out = [];
  let current = null;
  let ignores = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\s+$/, '');
    if (current === null) {
      const ignore = /^#\s*hadolint ignore=([\w,]+)/.exec(line);
      if (ignore) ignores.push(...ignore[1].split(','));
      if (!line.trim() || line.trim().startsWith('#')) return;
      current = { line: i + 1, text: '', ignores };
      ignores = [];
    } else if (line.trim().startsWith('#')) {
      return;  // a comment inside a continued instruction
    }
    const continued = line.endsWith('\\');
    current.text += `${continued ? line.slice(0, -1) : line} `;
    if (!continued) {
      const m = /^\s*(\w+)\s*(.*)$/.exec(current.text);
      out.push({ line: current.line, keyword: m[1].toUpperCase(), args: m[2].trim(), ignores: current.ignores });
      current = null;
    }
  });
  return out;
}

function checkFile(file) {
  const rel = path.relative(repoRoot, file);
  const fail = (line, message) => problems.push(`${rel}:${line}: ${message}`);
  const text = readFileSync(file, 'utf8');

  // 1. dockerfile-utils: every diagnostic counts, warnings included.
  const settings = { deprecatedMaintainer: ValidationSeverity.ERROR, instructionCasing: ValidationSeverity.ERROR,
                     instructionWorkdirRelative: ValidationSeverity.ERROR, emptyContinuationLine: ValidationSeverity.ERROR };
  for (const d of validate(text, settings)) fail(d.range.start.line + 1, `dockerfile-utils: ${d.message}`);

  // 2. Rules, stage by stage.
  const instructions = parse(text);
  const args = new Map();  // global ARG defaults, for the FROM lines
  const stages = [];
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') {
      stages.push({ from: ins, instructions: [], pipefail: false });
    } else if (stages.length === 0) {
      if (ins.keyword === 'ARG') {
        const [name, value] = ins.args.split('=');
        args.set(name, value);
      } else {
        fail(ins.line, `${ins.keyword} before the first FROM`);
      }
    } else {
      stages.at(-1).instructions.push(ins);
    }
  }
  if (stages.length < 2) fail(1, 'must be multi-stage (a build stage and a runtime stage)');
  for (const [k, stage] of stages.entries()) {
    const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(stage.from.args);
    const image = m[1].replace(/\$\{(\w+)\}/g, (_, a) => args.get(a) ?? `\${${a}}`);
    if (image.includes('${')) fail(stage.from.line, `FROM uses an ARG without a default: ${m[1]}`);
    const tag = image.includes(':') ? image.split(':').pop() : '';
    if (!tag) fail(stage.from.line, `DL3006: tag the base image (${image})`);
    if (tag === 'latest') fail(stage.from.line, `DL3007: do not use :latest (${image})`);
    if (k < stages.length - 1 && !m[2]) fail(stage.from.line, 'name every build stage (FROM ... AS name)');
    stage.name = m[2];
    for (const ins of stage.instructions) {
      const skip = (code) => ins.ignores.includes(code);
      if (ins.keyword === 'SHELL' && /pipefail/.test(ins.args)) stage.pipefail = true;
      if (ins.keyword === 'ADD' && !/^(https?:|--)/.test(ins.args)) fail(ins.line, 'DL3020: use COPY for local files');
      if (ins.keyword === 'WORKDIR' && !ins.args.startsWith('/')) fail(ins.line, 'DL3000: WORKDIR must be absolute');
      if (ins.keyword !== 'RUN') continue;
      const run = ins.args;
      if (/(^|[;&|]\s*)sudo\s/.test(run)) fail(ins.line, 'DL3004: no sudo');
      if (/(^|[;&|]\s*)apt\s/.test(run)) fail(ins.line, 'DL3027: use apt-get, not apt');
      if (/(^|&&\s*)cd\s/.test(run)) fail(ins.line, 'DL3003: use WORKDIR instead of cd');
      if (/\|/.test(run.replace(/\|\|/g, '')) && !stage.pipefail) {
        fail(ins.line, 'DL4006: set SHELL ["/bin/bash", "-o", "pipefail", "-c"] before a RUN with a pipe');
      }
      if (/apt-get install/.test(run)) {
        if (!/apt-get install[^&;]*\s-y\b/.test(run)) fail(ins.line, 'apt-get install needs -y');
        if (!/--no-install-recommends/.test(run) && !skip('DL3015')) fail(ins.line, 'DL3015: apt-get install --no-install-recommends');
        if (!/rm -rf \/var\/lib\/apt\/lists/.test(run)) fail(ins.line, 'DL3009: remove /var/lib/apt/lists in the same RUN');
        if (!/apt-get update/.test(run)) fail(ins.line, 'apt-get update in the same RUN as the install');
        if (!skip('DL3008') && !/=\d/.test(run)) fail(ins.line, 'DL3008: pin package versions or say why not (# hadolint ignore=DL3008)');
      }
    }
  }

  // The runtime stage: non-root, health check, entrypoint, artefacts from the build stage.
  const last = stages.at(-1);
  if (!last) return;
  const find = (kw) => last.instructions.filter((i) => i.keyword === kw);
  const users = find('USER');
  const lastRun = Math.max(0, ...find('RUN').map((i) => i.line));
  if (users.length === 0) {
    fail(last.from.line, 'DL3002: the final stage must switch to a non-root USER');
  } else {
    const user = users.at(-1);
    if (/^(root|0)(:|$)/.test(user.args)) fail(user.line, 'DL3002: the final USER must not be root');
    if (user.line < lastRun) fail(user.line, 'USER must come after the last RUN of the final stage');
  }
  const health = find('HEALTHCHECK');
  if (health.length !== 1 || !/CMD .*\/health\b/.test(health[0]?.args || '')) {
    fail(last.from.line, 'the final stage needs one HEALTHCHECK that queries /health');
  }
  const entry = find('ENTRYPOINT');
  if (entry.length !== 1 || !entry[0].args.startsWith('[')) fail(last.from.line, 'one exec-form ENTRYPOINT');
  if (!find('EXPOSE').some((i) => /\b8000\b/.test(i.args))) fail(last.from.line, 'EXPOSE 8000');
  const builds = stages.slice(0, -1).map((s) => s.name);
  const copies = find('COPY').filter((i) => /--from=(\S+)/.test(i.args));
  if (copies.length === 0) fail(last.from.line, 'the final stage copies nothing from the build stage');
  for (const c of copies) {
    const from = /--from=(\S+)/.exec(c.args)[1];
    if (!builds.includes(from)) fail(c.line, `COPY --from=${from}: no such stage`);
  }

  // 3. Build inputs: CMake options, installed repository files, the context filter.
  for (const m of text.matchAll(/-D(DELTASERVE_\w+)=/g)) {
    const declared = new RegExp(`(option\\(${m[1]}\\b|set\\(${m[1]}\\s[^)]*\\bCACHE\\b)`);
    if (!declared.test(cmakeText)) fail(1, `CMake option or cache variable ${m[1]} does not exist`);
  }
  const used = [...text.matchAll(/\s(models\/[\w.-]+)/g)].map((m) => m[1]);
  for (const f of used) if (!existsSync(path.join(repoRoot, f))) fail(1, `${f} is not in the repository`);
  const ignoreFile = `${file}.dockerignore`;
  if (!existsSync(ignoreFile)) {
    fail(1, `no ${path.basename(ignoreFile)} beside it (the build context would carry build/ and node_modules/)`);
  } else {
    const patterns = readFileSync(ignoreFile, 'utf8').split('\n').map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    for (const needed of ['build', 'node_modules', '.git']) {
      if (!patterns.includes(needed)) fail(1, `${path.basename(ignoreFile)} should exclude ${needed}`);
    }
    for (const f of [...used, 'CMakeLists.txt', 'cli', 'server', 'runtime', 'scheduler', 'kernels']) {
      if (patterns.some((p) => f === p || f.startsWith(`${p}/`))) fail(1, `${path.basename(ignoreFile)} excludes ${f}, which the build needs`);
    }
  }
}

function hadolint(files) {
  try {
    execFileSync('hadolint', ['--version'], { stdio: 'ignore' });
  } catch (_) {
    console.log('hadolint: not installed (Debian 12 has no package); the rules above stand in for it');
    return;
  }
  try {
    execFileSync('hadolint', ['--failure-threshold', 'warning', ...files], { stdio: 'pipe' });
    console.log('hadolint: clean');
  } catch (e) {
    problems.push(`hadolint:\n${e.stdout}${e.stderr}`);
  }
}

// Every CMake file of the project, for the -D options the Dockerfiles pass.
function cmakeFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.isDirectory()) {
      return ['build', 'node_modules', '.git', 'tests'].includes(e.name) ? [] : cmakeFiles(path.join(dir, e.name));
    }
    return e.name === 'CMakeLists.txt' || e.name.endsWith('.cmake') ? [path.join(dir, e.name)] : [];
  });
}
const cmakeText = cmakeFiles(repoRoot).map((f) => readFileSync(f, 'utf8')).join('\n');

const dockerDir = path.join(repoRoot, 'deploy/docker');
const files = process.argv.length > 2
  ? process.argv.slice(2).map((f) => path.resolve(f))
  : readdirSync(dockerDir).filter((f) => /^Dockerfile\.\w+$/.test(f)).map((f) => path.join(dockerDir, f));
if (files.length < 2) problems.push('expected deploy/docker/Dockerfile.cuda and Dockerfile.rocm');
files.forEach(checkFile);
hadolint(files);
if (problems.length) {
  console.error(`${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`dockerfiles: ${files.map((f) => path.basename(f)).join(', ')} pass`);
