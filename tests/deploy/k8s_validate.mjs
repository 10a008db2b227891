// Validates deploy/k8s/*.yaml offline, in three layers:
//   1. schema: each object against the Kubernetes OpenAPI schema of its apiVersion/kind
//      (npm kubernetes-models; the PodMonitor through @kubernetes-models/prometheus-operator):
//      types, enums, required fields;
//   2. strict fields: every key must be a field of its type (a misspelt `readinesProbe` is
//      silently dropped by the API server; kubeconform -strict catches the same), walked over
//      the packages' type declarations;
//   3. wiring: the Service, PodMonitor and HPA find the Deployment's pods, port and metric;
//      probes, preStop drain and grace period, GPU requests, non-root.
//
// Usage: node tests/deploy/k8s_validate.mjs   (exit 1 with a list of problems)
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';

import { repoRoot } from './daemon_process.mjs';

// An optional argument names another folder (used to check that broken manifests fail).
const k8sDir = process.argv[2] ? path.resolve(process.argv[2]) : path.join(repoRoot, 'deploy/k8s');
const modules = path.join(repoRoot, 'node_modules');
const problems = [];
const fail = (where, message) => problems.push(`${where}: ${message}`);

// --- 1. schema -----------------------------------------------------------------------------
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  if (group === 'monitoring.coreos.com') {
    return `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  }
  return `kubernetes-models/${group ? `${group}/` : ''}${version}/${kind}`;
}

async function validateSchema(where, doc) {
  const spec = modelPath(doc.apiVersion, doc.kind);
  let Model;
  try {
    Model = (await import(spec))[doc.kind];
  } catch (e) {
    fail(where, `no schema for ${doc.apiVersion} ${doc.kind} (${e.message.split('\n')[0]})`);
    return null;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
  return path.join(modules, `${spec}.d.ts`);
}

// --- 2. strict fields over the .d.ts declarations --------------------------------------------
const declarations = new Map();  // file -> {imports: Map(name -> file), interfaces: Map(name -> body)}

function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

// The text between the brace at `open` and its match.
function braced(text, open) {
  let depth = 0;
  for (let i = open; i < text.length; ++i) {
    if (text[i] === '{') ++depth;
    else if (text[i] === '}' && --depth === 0) return text.slice(open + 1, i);
  }
  throw new Error('unbalanced braces');
}

function loadDeclarations(file) {
  if (declarations.has(file)) return declarations.get(file);
  const text = stripComments(readFileSync(file, 'utf8'));
  const imports = new Map();
  for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    const target = m[2].startsWith('.') ? path.resolve(path.dirname(file), m[2]) : path.join(modules, m[2]);
    const dts = `${target.replace(/\.js$/, '')}.d.ts`;
    for (const name of m[1].split(',').map((x) => x.trim()).filter(Boolean)) {
      const [from, as] = name.split(/\s+as\s+/);
      imports.set(as || from, dts);
    }
  }
  const interfaces = new Map();
  for (const m of text.matchAll(/export interface (\w+)[^{]*\{/g)) {
    interfaces.set(m[1], braced(text, m.index + m[0].length - 1));
  }
  // `export type { IFoo as IIoK8s...Foo }`: the long names other files import.
  for (const m of text.matchAll(/export type \{([^}]*)\}/g)) {
    for (const pair of m[1].split(',')) {
      const [from, as] = pair.trim().split(/\s+as\s+/);
      if (as && interfaces.has(from)) interfaces.set(as, interfaces.get(from));
    }
  }
  const entry = { imports, interfaces };
  declarations.set(file, entry);
  return entry;
}

// Splits an object-type body into {field: typeText}, keeping nested braces and generics.
function fieldsOf(body) {
  const fields = new Map();
  let i = 0;
  while (i < body.length) {
    const m = /^\s*"?([\w$-]+)"?\??\s*:\s*/.exec(body.slice(i));
    if (!m) break;
    i += m[0].length;
    let depth = 0;
    let j = i;
    for (; j < body.length; ++j) {
      const c = body[j];
      if (c === '{' || c === '<' || c === '(') ++depth;
      else if (c === '}' || c === '>' || c === ')') --depth;
      else if (c === ';' && depth === 0) break;
    }
    fields.set(m[1], body.slice(i, j).trim());
    i = j + 1;
  }
  return fields;
}

// Walks `value` against the type `typeText` declared in `file`.
function strictWalk(where, value, typeText, file) {
  if (value === null || typeof value !== 'object') return;
  const t = typeText.trim();
  const array = /^Array<([\s\S]*)>$/.exec(t);
  if (array) {
    if (Array.isArray(value)) value.forEach((v, k) => strictWalk(`${where}[${k}]`, v, array[1], file));
    return;
  }
  if (t.startsWith('{')) {
    const inner = braced(t, 0);
    const map = /^\s*\[key: string\]\s*:\s*([\s\S]*?);?\s*$/.exec(inner);
    if (map) {
      for (const [k, v] of Object.entries(value)) strictWalk(`${where}.${k}`, v, map[1], file);
    } else {
      checkObject(where, value, fieldsOf(inner), file);
    }
    return;
  }
  if (!/^I\w+$/.test(t)) return;  // a primitive, a union, IntOrString, Quantity, ...
  const decl = loadDeclarations(file);
  let body = decl.interfaces.get(t);
  let bodyFile = file;
  if (body === undefined && decl.imports.has(t)) {
    bodyFile = decl.imports.get(t);
    if (!existsSync(bodyFile)) return;
    body = loadDeclarations(bodyFile).interfaces.get(t);
  }
  if (body === undefined) return;  // a type alias, not an object
  checkObject(where, value, fieldsOf(body), bodyFile);
}

function checkObject(where, value, fields, file) {
  if (fields.size === 0) return;  // free-form object
  for (const [key, v] of Object.entries(value)) {
    if (!fields.has(key)) {
      fail(where, `unknown field "${key}" (known: ${[...fields.keys()].join(', ')})`);
      continue;
    }
    strictWalk(`${where}.${key}`, v, fields.get(key), file);
  }
}

function validateStrict(where, doc, dtsFile) {
  const decl = loadDeclarations(dtsFile);
  const main = `I${doc.kind}`;
  const body = decl.interfaces.get(main);
  if (!body) {
    fail(where, `no declaration ${main} in ${dtsFile}`);
    return;
  }
  checkObject(where, doc, fieldsOf(body), dtsFile);
}

// --- 3. wiring -----------------------------------------------------------------------------
const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v);

function checkWiring(objects) {
  const byKind = (kind) => objects.filter((o) => o.doc.kind === kind);
  const deployments = byKind('Deployment');
  if (deployments.length !== 1) {
    fail('deploy/k8s', `expected one Deployment, found ${deployments.length}`);
    return;
  }
  const { doc: dep, where: depWhere } = deployments[0];
  const pod = dep.spec.template;
  if (!matches(dep.spec.selector.matchLabels, pod.metadata.labels)) {
    fail(depWhere, 'selector does not match the pod template labels');
  }
  const container = pod.spec.containers.find((c) => c.name === 'deltaserve');
  if (!container) {
    fail(depWhere, 'no container named deltaserve');
    return;
  }
  const portNames = new Set((container.ports || []).map((p) => p.name));
  const probe = (p, pathWanted, what) => {
    if (!p?.httpGet || p.httpGet.path !== pathWanted || !portNames.has(p.httpGet.port)) {
      fail(depWhere, `${what} must be an httpGet of ${pathWanted} on a named container port`);
    }
  };
  probe(container.readinessProbe, '/ready', 'readinessProbe');
  probe(container.livenessProbe, '/health', 'livenessProbe');
  const gpu = (r) => r && (r['nvidia.com/gpu'] !== undefined || r['amd.com/gpu'] !== undefined);
  if (!gpu(container.resources?.requests) || !gpu(container.resources?.limits)) {
    fail(depWhere, 'the container must request and limit a GPU (nvidia.com/gpu or amd.com/gpu)');
  }
  const sc = pod.spec.securityContext || {};
  if (sc.runAsNonRoot !== true || !(sc.runAsUser > 0)) fail(depWhere, 'the pod must run as a non-root user');
  if (container.securityContext?.allowPrivilegeEscalation !== false) {
    fail(depWhere, 'allowPrivilegeEscalation must be false');
  }

  // Drain: preStop must stop the daemon with SIGTERM and wait; the grace period must cover
  // the preStop delay plus the daemon's shutdown_grace_s.
  const preStop = container.lifecycle?.preStop?.exec?.command?.join(' ') || '';
  if (!/kill -TERM 1/.test(preStop)) fail(depWhere, 'preStop must start the drain (SIGTERM to the daemon)');
  const delay_s = Number((/sleep (\d+)/.exec(preStop) || [0, 0])[1]);
  const config = byKind('ConfigMap').find((o) => o.doc.metadata.name === 'deltaserve-config');
  const graceDrain_s = config ? JSON.parse(config.doc.data['deltaserve.json']).shutdown_grace_s : undefined;
  if (!(graceDrain_s > 0)) fail('configmap.yaml', 'deltaserve.json must set shutdown_grace_s');
  const grace_s = pod.spec.terminationGracePeriodSeconds;
  if (!(grace_s > delay_s + graceDrain_s)) {
    fail(depWhere, `terminationGracePeriodSeconds (${grace_s}) must exceed the preStop delay (${delay_s}) + shutdown_grace_s (${graceDrain_s})`);
  }
  const configVolume = pod.spec.volumes.find((v) => v.configMap?.name === 'deltaserve-config');
  if (!configVolume) fail(depWhere, 'the deltaserve-config ConfigMap is not mounted');

  for (const { doc, where } of byKind('Service')) {
    if (!matches(doc.spec.selector, pod.metadata.labels)) fail(where, 'selector matches no deltaserve pod');
    for (const p of doc.spec.ports) {
      if (typeof p.targetPort === 'string' && !portNames.has(p.targetPort)) {
        fail(where, `targetPort ${p.targetPort} is not a container port name`);
      }
    }
  }
  for (const { doc, where } of byKind('PodMonitor')) {
    if (!matches(doc.spec.selector.matchLabels, pod.metadata.labels)) fail(where, 'selector matches no deltaserve pod');
    for (const e of doc.spec.podMetricsEndpoints) {
      if (!portNames.has(e.port)) fail(where, `port ${e.port} is not a container port name`);
    }
  }
  const adapter = byKind('ConfigMap').find((o) => o.doc.data?.['config.yaml']);
  const adapterMetrics = new Set(adapter ? YAML.parse(adapter.doc.data['config.yaml']).rules.map((r) => r.name.as) : []);
  const hpas = byKind('HorizontalPodAutoscaler');
  if (hpas.length === 0) fail('deploy/k8s', 'no HorizontalPodAutoscaler');
  for (const { doc, where } of hpas) {
    const ref = doc.spec.scaleTargetRef;
    if (ref.kind !== 'Deployment' || ref.name !== dep.metadata.name) fail(where, 'does not scale the deltaserve Deployment');
    for (const m of doc.spec.metrics) {
      const name = m.pods?.metric?.name || m.object?.metric?.name || m.external?.metric?.name;
      if (!adapterMetrics.has(name)) fail(where, `metric ${name} is not served by the Prometheus adapter rules`);
    }
  }
}

// --- main ----------------------------------------------------------------------------------
const objects = [];
for (const file of readdirSync(k8sDir).filter((f) => /\.ya?ml$/.test(f)).sort()) {
  const docs = YAML.parseAllDocuments(readFileSync(path.join(k8sDir, file), 'utf8'));
  docs.forEach((d, i) => {
    if (d.errors.length) {
      fail(file, `YAML: ${d.errors[0].message}`);
      return;
    }
    const doc = d.toJSON();
    if (doc) objects.push({ where: `${file}#${i} ${doc.kind}/${doc.metadata?.name}`, doc });
  });
}
for (const { where, doc } of objects) {
  if (!doc.apiVersion || !doc.kind) {
    fail(where, 'apiVersion and kind are required');
    continue;
  }
  const dts = await validateSchema(where, doc);
  if (dts) validateStrict(where, doc, dts);
}
checkWiring(objects);

if (problems.length) {
  console.error(`${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`k8s: ${objects.length} objects valid (${objects.map((o) => o.doc.kind).join(', ')})`);
