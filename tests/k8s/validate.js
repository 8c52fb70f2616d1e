#!/usr/bin/env node
// Validates rendered Kubernetes manifests offline against the OpenAPI schemas of Kubernetes
// 1.27 (npm's kubernetes-models: its classes validate types, enums, formats and required
// fields with ajv). The OpenAPI schemas leave objects open (no additionalProperties: false),
// so an unknown field would pass them; this script also walks every object against the
// field lists of the same models (their .d.ts interfaces) and reports any field the API does
// not define, naming its path: the API server would drop it (or refuse it, with
// --validate=strict), so a typo such as `livenessprobe` must fail here.
//
//   node validate.js FILE...      every document of every FILE (YAML, multi-document)
//   node validate.js --self-test  broken objects must be refused, a good one accepted
//
// Exit status: 0 all valid, 1 an object is invalid (each problem printed), 2 usage or I/O.
'use strict';

const fs = require('fs');
const path = require('path');

let YAML;
try {
  YAML = require('yaml');
  require.resolve('kubernetes-models/package.json');
} catch (e) {
  console.error(`validate.js: node modules missing in ${__dirname}/node_modules ` +
                `(run "npm ci" there, as scripts/lib.sh does): ${e.message}`);
  process.exit(77);
}

// ---- the field lists, read from the models' TypeScript declarations ----------------------

const interfaces = new Map();  // "<file>#<exported name>" -> {props: Map<name, type>} | null

function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

function resolveImport(fromFile, spec) {
  if (spec.startsWith('.')) return path.resolve(path.dirname(fromFile), spec + '.d.ts');
  return require.resolve(spec).replace(/\.js$/, '.d.ts');
}

// The text between the braces that open at `open`.
function braceBody(text, open) {
  let depth = 0;
  for (let i = open; i < text.length; ++i) {
    if (text[i] === '{') ++depth;
    else if (text[i] === '}' && --depth === 0) return text.slice(open + 1, i);
  }
  throw new Error('unbalanced braces');
}

// Top-level `"name"?: type;` members of an interface body.
function parseMembers(body) {
  const props = new Map();
  let i = 0;
  const re = /\s*"([^"]+)"\??\s*:\s*/y;
  while (i < body.length) {
    re.lastIndex = i;
    const m = re.exec(body);
    if (!m) break;
    let j = re.lastIndex, depth = 0;
    for (; j < body.length; ++j) {
      const c = body[j];
      if (c === '<' || c === '{' || c === '(' || c === '[') ++depth;
      else if (c === '>' || c === '}' || c === ')' || c === ']') --depth;
      else if (c === ';' && depth === 0) break;
    }
    props.set(m[1], body.slice(re.lastIndex, j).replace(/\s+/g, ''));
    i = j + 1;
  }
  return props;
}

// The interface a .d.ts file exports under `name` (or its only interface): its members, the
// file's imports (to follow member types), or null when it is a type alias (a leaf such as
// Quantity or IntOrString).
function loadInterface(file, name) {
  const key = `${file}#${name || ''}`;
  if (interfaces.has(key)) return interfaces.get(key);
  const text = stripComments(fs.readFileSync(file, 'utf8'));
  const imports = new Map();
  for (const m of text.matchAll(/import\s*{([^}]*)}\s*from\s*"([^"]+)"/g)) {
    for (const n of m[1].split(',').map((s) => s.trim()).filter(Boolean)) imports.set(n, m[2]);
  }
  let local = null;
  if (name) {
    const alias = new RegExp(`(\\w+)\\s+as\\s+${name}\\b`).exec(text);
    local = alias ? alias[1] : name;
  }
  const decl = new RegExp(`export\\s+interface\\s+${local || '\\w+'}\\b[^{]*{`).exec(text);
  let result = null;
  if (decl) {
    result = {file, imports, props: parseMembers(braceBody(text, decl.index + decl[0].length - 1))};
  }
  interfaces.set(key, result);
  return result;
}

// Walks `value` against the type expression `type` (from interface `owner`); pushes problems.
function walk(value, type, owner, where, problems) {
  if (value === null || value === undefined) return;
  let m;
  if ((m = /^Array<(.*)>$/.exec(type))) {
    if (Array.isArray(value)) value.forEach((v, i) => walk(v, m[1], owner, `${where}[${i}]`, problems));
    return;
  }
  if ((m = /^\{\[key:string\]:(.*);?\}$/.exec(type))) {
    if (typeof value === 'object' && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walk(v, m[1].replace(/;$/, ''), owner, `${where}.${k}`, problems);
    }
    return;
  }
  if (!/^I\w+$/.test(type) || !owner.imports.has(type)) return;  // a primitive, enum or union
  const iface = loadInterface(resolveImport(owner.file, owner.imports.get(type)), type);
  checkObject(value, iface, where, problems);
}

function checkObject(value, iface, where, problems) {
  if (!iface || typeof value !== 'object' || Array.isArray(value)) return;
  if (iface.props.size === 0) return;  // free-form (RawExtension, FieldsV1)
  for (const [k, v] of Object.entries(value)) {
    if (!iface.props.has(k)) {
      problems.push(`${where}.${k}: unknown field (not in the Kubernetes 1.27 schema)`);
      continue;
    }
    walk(v, iface.props.get(k), iface, `${where}.${k}`, problems);
  }
}

// ---- one object -----------------------------------------------------------------------

function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  return `kubernetes-models/${group ? group + '/' : ''}${version}/${kind}`;
}

// The problems of one object (empty: valid). `name` says where it came from.
function validateObject(obj, name) {
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) return [`${name}: not an object`];
  if (typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') {
    return [`${name}: apiVersion and kind must be strings`];
  }
  const id = `${name}: ${obj.kind} ${obj.metadata && obj.metadata.name}`;
  const mod = modelPath(obj.apiVersion, obj.kind);
  let Model;
  try {
    Model = require(mod)[obj.kind];
  } catch (e) {
    Model = undefined;
  }
  if (!Model) return [`${id}: ${obj.apiVersion} ${obj.kind} is not a Kubernetes 1.27 kind`];
  const problems = [];
  try {
    new Model(JSON.parse(JSON.stringify(obj))).validate();
  } catch (e) {
    for (const line of String(e.message).split('\n')) problems.push(`${id}: ${line}`);
  }
  const file = require.resolve(mod).replace(/\.js$/, '.d.ts');
  const strict = [];
  checkObject(obj, loadInterface(file, null), '', strict);
  for (const p of strict) problems.push(`${id}: ${p.replace(/^\./, '')}`);
  return problems;
}

function validateFile(file) {
  let docs;
  try {
    docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    console.error(`validate.js: ${file}: ${e.message}`);
    process.exit(2);
  }
  const problems = [];
  let count = 0;
  for (const doc of docs) {
    if (doc.errors.length) {
      problems.push(`${file}: YAML: ${doc.errors[0].message}`);
      continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    ++count;
    problems.push(...validateObject(obj, path.basename(file)));
  }
  return {count, problems};
}

// ---- self test: the validator must refuse what the API server would ----------------------

function selfTest() {
  const good = {
    apiVersion: 'apps/v1', kind: 'DaemonSet', metadata: {name: 'x'},
    spec: {
      selector: {matchLabels: {a: 'b'}},
      template: {
        metadata: {labels: {a: 'b'}},
        spec: {
          containers: [{
            name: 'c', image: 'i', ports: [{containerPort: 80}],
            livenessProbe: {httpGet: {path: '/healthz', port: 8080}},
            resources: {requests: {cpu: '100m', 'hugepages-2Mi': '1Gi'}},
          }],
        },
      },
    },
  };
  const broken = (mutate) => { const o = JSON.parse(JSON.stringify(good)); mutate(o); return o; };
  const c = (o) => o.spec.template.spec.containers[0];
  const cases = [
    ['a valid DaemonSet', good, null],
    ['an unknown container field', broken((o) => { c(o).livenessprobe = c(o).livenessProbe; }),
     /containers\[0\]\.livenessprobe: unknown field/],
    ['an unknown field deep in a probe', broken((o) => { c(o).livenessProbe.httpGet.paht = '/x'; }),
     /httpGet\.paht: unknown field/],
    ['an unknown metadata field (apimachinery types)', broken((o) => { o.metadata.label = {}; }),
     /metadata\.label: unknown field/],
    ['an unknown field in a volume', broken((o) => {
      o.spec.template.spec.volumes = [{name: 'v', emptyDir: {medium: 'Memory', size: '1Gi'}}];
    }), /volumes\[0\]\.emptyDir\.size: unknown field/],
    ['an unknown top-level field', broken((o) => { o.specs = {}; }), /specs: unknown field/],
    ['a port given as a string', broken((o) => { c(o).ports[0].containerPort = '80'; }),
     /containerPort must be integer/],
    ['a bad enum', broken((o) => { c(o).imagePullPolicy = 'Sometimes'; }),
     /imagePullPolicy must be equal to one of the allowed values/],
    ['a missing required field', broken((o) => { delete c(o).name; }),
     /must have required property '?name'?/],
    ['an unknown kind', {apiVersion: 'apps/v1', kind: 'DaemonSett', metadata: {name: 'x'}},
     /not a Kubernetes 1.27 kind/],
  ];
  let failed = 0;
  for (const [what, obj, expect] of cases) {
    const problems = validateObject(obj, 'self-test');
    const ok = expect === null ? problems.length === 0 : problems.some((p) => expect.test(p));
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}: ${problems.length ? problems.join('; ') : 'valid'}`);
    if (!ok) ++failed;
  }
  return failed === 0;
}

// ---- main -------------------------------------------------------------------------------

const args = process.argv.slice(2);
if (args.length === 0) {
  console.error('usage: validate.js FILE... | --self-test');
  process.exit(2);
}
if (args[0] === '--self-test') process.exit(selfTest() ? 0 : 1);
let bad = 0;
for (const file of args) {
  const {count, problems} = validateFile(file);
  for (const p of problems) console.log(p);
  console.log(`${file}: ${count} object(s), ${problems.length} problem(s)`);
  if (count === 0) {
    console.log(`${file}: no objects (an empty render is an error)`);
    ++bad;
  }
  bad += problems.length;
}
process.exit(bad ? 1 : 0);
