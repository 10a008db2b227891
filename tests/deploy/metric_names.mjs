// Every metric the operations artefacts query must exist on a live daemon: starts the
// daemon (the embedded default model on the CPU backend, as an operator would), scrapes
// /metrics, and checks each PromQL expression of
//   deploy/grafana/*.json                   (panel targets and template-variable queries)
//   deploy/prometheus/rules/*.yml           (alert expressions)
//   deploy/k8s/prometheus-adapter.yaml      (the HPA's seriesQuery / metricsQuery)
// for: metric names (deltaserve_* must be exposed; anything else must be a series that
// Prometheus or a named exporter makes), label names in matchers and by/on lists, and label
// values of `label="x"` / `label=~"a|b"` matchers. The expressions also go through
// `promtool check rules` so a dashboard query that does not parse fails here too.
//
// Usage: node tests/deploy/metric_names.mjs   (exit 1 with a list of problems)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import YAML from 'yaml';

import { repoRoot, startDaemon } from './daemon_process.mjs';

// Series that are not the daemon's: Prometheus' own, the blackbox exporter's, kube-state-metrics'.
const EXTERNAL_METRICS = new Set(['up', 'probe_success', 'kube_pod_status_ready']);
// Labels that Prometheus attaches at scrape time (deploy/prometheus, the PodMonitor).
const TARGET_LABELS = new Set(['job', 'instance', 'namespace', 'pod', 'model']);
const EXTERNAL_LABELS = new Set(['condition']);  // kube_pod_status_ready's
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or',
                          'unless', 'bool', 'offset', 'inf', 'nan']);

// --- what the artefacts query --------------------------------------------------------------
function dashboardExpressions() {
  const out = [];
  const dir = path.join(repoRoot, 'deploy/grafana');
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
    const dash = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
    const walk = (panels) => {
      for (const p of panels || []) {
        for (const t of p.targets || []) out.push({ where: `${file}: panel "${p.title}"`, expr: t.expr });
        walk(p.panels);
      }
    };
    walk(dash.panels);
    for (const v of dash.templating?.list || []) {
      const q = typeof v.query === 'object' ? v.query.query : v.query;
      const m = /^label_values\((.*),\s*\w+\)$/.exec(q || '');
      if (m) out.push({ where: `${file}: variable $${v.name}`, expr: m[1] });
    }
  }
  return out;
}

function ruleExpressions() {
  const out = [];
  const dir = path.join(repoRoot, 'deploy/prometheus/rules');
  for (const file of readdirSync(dir).filter((f) => /\.ya?ml$/.test(f))) {
    const doc = YAML.parse(readFileSync(path.join(dir, file), 'utf8'));
    for (const g of doc.groups) {
      for (const r of g.rules) out.push({ where: `${file}: ${r.alert || r.record}`, expr: r.expr });
    }
  }
  return out;
}

function adapterExpressions() {
  const out = [];
  const file = path.join(repoRoot, 'deploy/k8s/prometheus-adapter.yaml');
  for (const doc of YAML.parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJSON())) {
    if (doc?.kind !== 'ConfigMap') continue;
    const config = YAML.parse(doc.data['config.yaml']);
    for (const rule of config.rules) {
      const series = rule.seriesQuery.match(/^[a-zA-Z_:][\w:]*/)[0];
      out.push({ where: `prometheus-adapter.yaml: ${rule.name?.as || series}`, expr: rule.seriesQuery });
      // <<.Series>> is the series found above; the matchers come from the HPA's object.
      const q = rule.metricsQuery.replaceAll('<<.Series>>', series).replaceAll('<<.LabelMatchers>>', '')
        .replaceAll('<<.GroupBy>>', 'namespace, pod');
      out.push({ where: `prometheus-adapter.yaml: ${rule.name?.as || series} metricsQuery`, expr: q });
    }
  }
  return out;
}

// Grafana's variables, in a form PromQL parses.
const concrete = (expr) => expr.replaceAll('$__rate_interval', '1m').replaceAll('$__interval', '1m');

// --- a small PromQL reader: names, matchers and grouping labels ------------------------------
function parseExpr(expr) {
  let s = concrete(expr);
  const selectors = [];  // {metric, matchers: [{label, op, value}]}
  const grouping = [];   // label names in by/without/on/ignoring/group_*
  for (const m of s.matchAll(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
    grouping.push(...m[2].split(',').map((x) => x.trim()).filter(Boolean));
  }
  // `sum by (x) (...)` -> `sum (...)`; `a * on (x) group_left () b` -> `a * on group_left b`.
  s = s.replace(/\b(by|without)\s*\([^)]*\)/g, ' ')
    .replace(/\b(on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' $1 ');
  s = s.replace(/([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}/g, (_, metric, body) => {
    const matchers = [...body.matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)]
      .map((x) => ({ label: x[1], op: x[2], value: x[3] }));
    selectors.push({ metric: metric || '', matchers });
    return metric ? ` ${metric} ` : ' ';
  });
  s = s.replace(/"(?:[^"\\]|\\.)*"/g, ' ').replace(/\[[^\]]*\]/g, ' ');
  const names = [];
  for (const m of s.matchAll(/(?<![\w.:$])([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    if (m[2] || KEYWORDS.has(m[1].toLowerCase())) continue;  // a function / aggregation / keyword
    names.push(m[1]);
  }
  for (const sel of selectors) if (sel.metric && !names.includes(sel.metric)) names.push(sel.metric);
  return { names, selectors, grouping };
}

// --- the live exposition -------------------------------------------------------------------
function parseExposition(text) {
  const series = new Map();  // sample name -> Map(label -> Set(values))
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s/.exec(line);
    if (!m) throw new Error(`unparsable exposition line: ${line}`);
    if (!series.has(m[1])) series.set(m[1], new Map());
    const labels = series.get(m[1]);
    for (const l of (m[3] || '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) {
      if (!labels.has(l[1])) labels.set(l[1], new Set());
      labels.get(l[1]).add(l[2]);
    }
  }
  return series;
}

function check(items, live) {
  const problems = [];
  const liveLabels = new Set([...live.values()].flatMap((labels) => [...labels.keys()]));
  for (const { where, expr } of items) {
    const { names, selectors, grouping } = parseExpr(expr);
    for (const name of names) {
      if (EXTERNAL_METRICS.has(name)) continue;
      if (!live.has(name)) problems.push(`${where}: metric ${name} is not on /metrics`);
    }
    for (const { metric, matchers } of selectors) {
      const labels = live.get(metric);
      if (!labels) continue;  // reported above (or external)
      for (const { label, op, value } of matchers) {
        if (TARGET_LABELS.has(label)) continue;
        if (!labels.has(label)) {
          problems.push(`${where}: ${metric} has no label ${label}`);
          continue;
        }
        // Each literal alternative of an = or =~ matcher must be a value the daemon exports.
        const alternatives = op === '=' ? [value] : op === '=~' && /^[\w|]+$/.test(value) ? value.split('|') : [];
        for (const v of alternatives) {
          if (!labels.get(label).has(v)) problems.push(`${where}: ${metric}{${label}="${v}"} is not on /metrics`);
        }
      }
    }
    for (const label of grouping) {
      if (!TARGET_LABELS.has(label) && !EXTERNAL_LABELS.has(label) && !liveLabels.has(label)) {
        problems.push(`${where}: grouping label ${label} is on no series`);
      }
    }
  }
  return problems;
}

// Every expression through promtool's parser, as recording rules of a throwaway file.
function promtoolParse(items) {
  const dir = mkdtempSync(path.join(tmpdir(), 'deltaserve-promql-'));
  try {
    const rules = items.map(({ expr }, i) => ({ record: `deltaserve_check:expr_${i}`, expr: concrete(expr) }));
    const file = path.join(dir, 'exprs.yml');
    writeFileSync(file, YAML.stringify({ groups: [{ name: 'exprs', rules }] }));
    execFileSync('promtool', ['check', 'rules', file], { stdio: 'pipe' });
    return [];
  } catch (e) {
    return [`promtool cannot parse an expression:\n${e.stdout || ''}${e.stderr || ''}`];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// The dashboard's shape: what Grafana needs to import it and lay it out.
function dashboardShape() {
  const out = [];
  const dir = path.join(repoRoot, 'deploy/grafana');
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
    const dash = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
    if (!dash.uid || !dash.title || !Number.isInteger(dash.schemaVersion)) out.push(`${file}: uid, title and schemaVersion are required`);
    const ids = new Set();
    for (const p of dash.panels) {
      const g = p.gridPos || {};
      if (ids.has(p.id)) out.push(`${file}: duplicate panel id ${p.id}`);
      ids.add(p.id);
      if (!(g.w > 0 && g.h > 0 && g.x >= 0 && g.x + g.w <= 24 && g.y >= 0)) out.push(`${file}: panel "${p.title}" has a bad gridPos`);
      if (p.type === 'row') continue;
      if (!p.targets?.length) out.push(`${file}: panel "${p.title}" has no query`);
      for (const t of p.targets || []) {
        if (t.datasource?.uid !== '${datasource}') out.push(`${file}: panel "${p.title}" does not use the $datasource variable`);
      }
    }
  }
  return out;
}

const items = [...dashboardExpressions(), ...ruleExpressions(), ...adapterExpressions()];
// The default model with the vllm: set on as well, so either naming scheme may be used.
const daemon = await startDaemon(['--vllm-metrics']);
let problems;
let live;
try {
  const res = await fetch(`${daemon.url}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  live = parseExposition(await res.text());
} finally {
  const status = await daemon.stop();
  if (status.code !== 0) console.error(`daemon exit status ${JSON.stringify(status)}\n${daemon.log()}`);
}
problems = [...new Set([...dashboardShape(), ...check(items, live), ...promtoolParse(items)])];

const numNames = new Set(items.flatMap(({ expr }) => parseExpr(expr).names)).size;
if (problems.length) {
  console.error(`${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`metric names: ${items.length} expressions, ${numNames} distinct metrics, all on a live /metrics`);
