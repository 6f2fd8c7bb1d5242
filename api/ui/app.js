// driftline dashboard: hand-written ES module, no build step, no third-party code. It reads only the
// public query API of the server it was loaded from, so it works the same against every deployment.

const main = document.getElementById('main');
const KEY = 'driftline.apiKey';

// ---------- small DOM helpers (text is always set as text, never parsed as HTML) ----------

function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') el.className = value;
    else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

function errorBox(message) {
  return h('div', { class: 'error', role: 'alert' }, message);
}

function emptyBox(...lines) {
  return h('div', { class: 'empty' }, ...lines.map((line) => h('p', {}, line)));
}

function when(ts) {
  if (!ts) return '—';
  const date = new Date(ts);
  return isNaN(date) ? ts : date.toLocaleString();
}

// ---------- API ----------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, options = {}) {
  // Every write names its type, body or not: without API keys driftline refuses the types a form can send.
  const writes = options.method && options.method !== 'GET';
  const headers = { Accept: 'application/json', ...(writes ? { 'Content-Type': 'application/json' } : {}) };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(path, { ...options, headers });
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = text; }
  if (!response.ok) {
    let message = (body && body.error) || `HTTP ${response.status}`;
    if (response.status === 401) message = 'This server needs an API key: enter one above.';
    if (response.status === 403) message = `${message} (use a key with the right scope)`;
    throw new ApiError(response.status, message);
  }
  return { status: response.status, body };
}

const get = async (path) => (await api(path)).body;

// ---------- JSON with syntax highlighting ----------

function jsonNode(value, indent = 0) {
  const pad = '  '.repeat(indent);
  const out = [];
  const put = (cls, text) => out.push(h('span', { class: cls }, text));
  const walk = (v, level) => {
    const inner = '  '.repeat(level + 1);
    if (v === null) put('json-null', 'null');
    else if (typeof v === 'string') put('json-string', JSON.stringify(v));
    else if (typeof v === 'number') put('json-number', String(v));
    else if (typeof v === 'boolean') put('json-boolean', String(v));
    else if (Array.isArray(v)) {
      if (v.length === 0) { out.push('[]'); return; }
      out.push('[\n');
      v.forEach((item, i) => { out.push(inner); walk(item, level + 1); out.push(i < v.length - 1 ? ',\n' : '\n'); });
      out.push('  '.repeat(level) + ']');
    } else {
      const entries = Object.entries(v);
      if (entries.length === 0) { out.push('{}'); return; }
      out.push('{\n');
      entries.forEach(([k, item], i) => {
        out.push(inner); put('json-key', JSON.stringify(k)); out.push(': ');
        walk(item, level + 1); out.push(i < entries.length - 1 ? ',\n' : '\n');
      });
      out.push('  '.repeat(level) + '}');
    }
  };
  out.push(pad);
  walk(value, indent);
  return h('pre', { class: 'json' }, ...out);
}

// ---------- pages ----------

const statusChip = (status) => h('span', { class: `chip status-${status}` }, status);
// The round trip of the last probe (tools/list over HTTP, SSE or stdio); servers nobody probes show a dash.
const probeLatency = (s) => (typeof s.latency_ms === 'number' ? `${Math.round(s.latency_ms)} ms` : '—');

async function serversPage() {
  const servers = await get('/api/health/servers');
  if (servers.length === 0) {
    return [h('h1', {}, 'Servers'), emptyBox(
      'No MCP servers yet. Send a server\'s tool list and driftline keeps it as the baseline:',
      'curl -X PUT http://127.0.0.1:8000/api/servers/my-server/tools -H "Content-Type: application/json" -d @tools.json',
      'Then send tool-call spans to POST /v1/spans, or run `make demo` to see a scripted scenario.',
    )];
  }
  const rows = servers.map((s) => {
    const go = () => { location.hash = `#/servers/${encodeURIComponent(s.server_name)}/drift`; };
    return h('tr', { class: 'clickable', tabindex: '0', 'data-server': s.server_name, onclick: go,
      onkeydown: (e) => { if (e.key === 'Enter') go(); } },
      h('td', {}, h('a', { href: `#/servers/${encodeURIComponent(s.server_name)}/drift` }, s.server_name),
        s.max_severity === 'high' ? h('div', { class: 'security-banner' }, '⚠ high-severity security flag') : null),
      h('td', {}, statusChip(s.status)),
      h('td', { class: 'mono' }, s.schema_hash || '—'),
      h('td', {}, String(s.tool_count)),
      h('td', { class: 'hide-narrow probe-latency' }, probeLatency(s)),
      h('td', { class: 'hide-narrow' }, when(s.last_seen)),
      h('td', { class: 'open-drift', title: 'open events, and the changes in them by classification' }, openDriftText(s)),
    );
  });
  const healthy = servers.filter((s) => s.status === 'UP').length;
  return [
    h('h1', {}, 'Servers'),
    h('p', {}, `${healthy}/${servers.length} servers healthy`),
    h('div', { class: 'table-wrap' }, h('table', { id: 'servers' },
      h('thead', {}, h('tr', {}, ['Server', 'Status', 'Schema hash', 'Tools', 'Probe', 'Last seen', 'Open drift'].map((t, i) =>
        h('th', { class: i === 4 || i === 5 ? 'hide-narrow' : null }, t)))),
      h('tbody', {}, rows))),
  ];
}

// One vocabulary for drift counts, in the server list and the Drift tab alike: how many open *events*, then
// the *changes* inside them by classification (an event with three changes is one event, three changes).
const openEventsLabel = (events) => `${events} open event${events === 1 ? '' : 's'}:`;

function summaryChips(events) {
  const open = events.filter((e) => e.status === 'open');
  const count = (c) => open.flatMap((e) => e.changes).filter((ch) => ch.classification === c).length;
  const chips = [['BREAKING', 'breaking'], ['WARNING', 'warning'], ['COMPATIBLE', 'compatible']]
    .filter(([c]) => count(c) > 0)
    .map(([c, word]) => h('span', { class: `chip chip-${word}`, 'data-chip': word }, `${count(c)} ${word}`));
  const label = open.length ? h('span', { class: 'chips-label' }, openEventsLabel(open.length)) : null;
  return h('div', { class: 'chips', id: 'summary-chips', title: 'changes in open events, by classification' }, label, chips);
}

function openDriftText(s) {
  const e = s.open_drift;
  const events = e.breaking + e.warning + e.compatible;
  if (!events) return 'none';
  const c = s.open_changes || { breaking: 0, warning: 0, compatible: 0 };
  return `${openEventsLabel(events)} ${c.breaking} breaking · ${c.warning} warning · ${c.compatible} compatible`;
}

function impactTable(impact) {
  if (!impact.consumers.length) return h('p', { class: 'no-callers' }, impact.message || 'No recent callers — tool may be unused.');
  return h('div', { class: 'table-wrap' }, h('table', { class: 'impact-table' },
    h('thead', {}, h('tr', {}, ['Agent', 'Calls', 'Errors', 'Avg latency', 'Risk'].map((t) => h('th', {}, t)))),
    h('tbody', {}, impact.consumers.map((c) => h('tr', {},
      h('td', {}, c.agent_name), h('td', {}, String(c.call_count)), h('td', {}, String(c.error_count)),
      h('td', {}, `${Math.round(c.avg_latency_ms)} ms`), h('td', { class: `risk-${c.risk}` }, c.risk))))));
}

function changeView(change, detectedAt) {
  const flags = change.security_flags.length ? h('div', { class: 'flags', role: 'note' },
    change.security_flags.map((f) => h('div', { class: 'flag' }, h('strong', {}, `⚠ ${f.rule} (${f.severity})`), ' ', f.excerpt))) : null;
  return h('div', { class: 'change', 'data-change': change.change_type },
    h('div', {},
      h('span', { class: `badge ${change.classification}` }, change.classification), ' ',
      h('span', { class: 'badge kind' }, change.change_type), ' ',
      h('strong', {}, change.tool_name), change.path ? h('span', { class: 'mono' }, ` · ${change.path}`) : null,
      h('span', { class: 'consequence' }, ` · ${when(detectedAt)}`)),
    h('div', { class: 'before-after' },
      h('div', { class: 'before' }, h('span', { class: 'box-label' }, 'BEFORE'), jsonNode(change.before)),
      h('div', { class: 'after' }, h('span', { class: 'box-label' }, 'AFTER'), jsonNode(change.after))),
    flags);
}

function eventCard(server, event, onAccepted) {
  const worst = event.max_classification || 'COMPATIBLE';
  const status = event.status === 'accepted'
    ? `accepted by ${event.accepted_by || '?'} · ${when(event.accepted_at)}`
    : event.status;
  const impactBox = h('div', { class: 'impact' }, h('h3', {}, 'Affected agents (24h)'), h('p', { class: 'loading' }, 'Loading…'));
  const tools = [...new Set(event.changes.map((c) => c.tool_name))];
  Promise.all(tools.map(async (tool) => {
    try {
      const impact = await get(`/api/health/servers/${encodeURIComponent(server)}/drift-impact?tool_name=${encodeURIComponent(tool)}&hours=24`);
      return h('div', { class: 'impact-tool', 'data-tool': tool }, h('strong', {}, tool), impactTable(impact));
    } catch (err) {
      return errorBox(`${tool}: ${err.message}`);
    }
  })).then((parts) => impactBox.replaceChildren(h('h3', {}, 'Affected agents (24h)'), ...parts));

  const schemas = h('div', { class: 'schemas', hidden: true },
    h('div', {}, h('span', { class: 'box-label' }, 'BEFORE'), jsonNode(event.previous_tools)),
    h('div', {}, h('span', { class: 'box-label' }, 'AFTER'), jsonNode(event.current_tools)));
  const toggle = h('button', { type: 'button', 'aria-expanded': 'false', class: 'toggle-schemas', onclick: () => {
    schemas.hidden = !schemas.hidden;
    toggle.setAttribute('aria-expanded', String(!schemas.hidden));
  } }, 'View full schemas (before/after)');

  const accept = event.status === 'open' ? h('button', { type: 'button', class: 'primary accept', onclick: async () => {
    if (!confirm(`Accept the current tool list of ${server} as its new baseline?`)) return;
    accept.disabled = true;
    try {
      await api(`/api/health/servers/${encodeURIComponent(server)}/drift-accept`, { method: 'POST' });
      onAccepted();
    } catch (err) {
      accept.disabled = false;
      accept.after(errorBox(err.message));
    }
  } }, 'Accept baseline') : null;

  return h('article', { class: `card event worst-${worst} ${event.status}`, 'data-event': event.id },
    h('div', { class: 'event-head' },
      worst === 'BREAKING' ? h('span', { class: 'alert-icon', 'aria-label': 'breaking' }, '⚠') : null,
      h('strong', {}, `${event.previous_hash} → ${event.current_hash}`),
      h('span', {}, when(event.detected_at)),
      event.max_severity === 'high' ? h('span', { class: 'security-banner' }, '⚠ high-severity security flag') : null,
      h('span', { class: 'event-status' }, status)),
    event.changes.map((c) => changeView(c, event.detected_at)),
    impactBox,
    h('div', { class: 'actions' }, toggle, ' ', accept),
    schemas);
}

async function driftTab(server) {
  // A bare array of events, newest first (the documented drift-history format).
  const history = await get(`/api/health/servers/${encodeURIComponent(server)}/drift-history?limit=100`);
  if (!history.length) {
    return [emptyBox(`No drift for ${server}: every tool list it sent matches its baseline.`,
      'A changed tool list (PUT /api/servers/NAME/tools) shows up here, classified.')];
  }
  const rerender = () => route();
  return [summaryChips(history), history.map((e) => eventCard(server, e, rerender))];
}

function paramCards(schema) {
  const required = new Set(schema.required || []);
  const props = Object.entries(schema.properties || {});
  if (!props.length) return h('p', {}, 'No parameters.');
  return h('div', { class: 'params' }, props.map(([name, p]) => h('div', { class: 'param', 'data-param': name },
    h('span', { class: 'param-name' }, name), ' ',
    h('span', { class: 'mono' }, Array.isArray(p.type) ? p.type.join(' | ') : (p.type || 'any')), ' ',
    h('span', { class: `chip ${required.has(name) ? 'req' : 'opt'}` }, required.has(name) ? 'required' : 'optional'),
    p.description ? h('div', {}, p.description) : null,
    p.enum ? h('div', {}, p.enum.map((v) => h('span', { class: 'enum-chip' }, String(v)))) : null)));
}

async function schemaTab(server) {
  const tools = await get(`/api/servers/${encodeURIComponent(server)}/tools`);
  const note = h('p', { class: 'note schema-note' }, 'Only tools captured from a tool list appear here; tools seen only in traces are in the Tools tab.');
  if (!tools.length) return [note, emptyBox(`No tool list captured for ${server} yet.`)];
  const sorted = [...tools].sort((a, b) => a.tool_name.localeCompare(b.tool_name));
  return [note, sorted.map((t) => h('details', { class: 'card tool', 'data-tool': t.tool_name },
    h('summary', {}, h('strong', {}, t.tool_name), ` — ${t.description || 'no description'} · ${Object.keys(t.input_schema.properties || {}).length} parameters`),
    paramCards(t.input_schema),
    h('details', { class: 'raw' }, h('summary', {}, 'raw JSON'), jsonNode(t.input_schema))))];
}

function toolsTable(tools, showServer) {
  if (!tools.length) return emptyBox('No tool calls seen yet. Send spans to POST /v1/spans.');
  return h('div', { class: 'table-wrap' }, h('table', { id: 'tools' },
    h('thead', {}, h('tr', {}, [showServer ? 'Server' : null, 'Tool', 'Calls', 'Errors', 'Avg latency', 'Shape status', 'Declared']
      .filter(Boolean).map((t) => h('th', {}, t)))),
    h('tbody', {}, tools.map((t) => h('tr', { 'data-tool': t.tool },
      showServer ? h('td', {}, t.server) : null,
      h('td', {}, t.tool), h('td', {}, String(t.calls)), h('td', {}, String(t.errors)),
      h('td', {}, `${Math.round(t.avg_latency_ms)} ms`), h('td', { class: 'mono shape-status' }, t.shape_status),
      h('td', {}, t.declared ? 'yes' : 'no — seen only in traces'))))));
}

async function toolsTab(server) {
  const tools = await get('/api/tools?hours=720');
  return [toolsTable(server ? tools.filter((t) => t.server === server) : tools, !server)];
}

// Wraps the keys named by the reasons' paths in the shape text.
function shapeWithPaths(shape, reasons) {
  const keys = new Set(reasons.map((r) => r.path.replace(/\[\]/g, '').split('.').pop()).filter((k) => k && k !== '(root)'));
  const parts = [];
  const re = /([{,])([^:{},[\]<>]+):/g;
  let last = 0;
  for (let m; (m = re.exec(shape)); ) {
    if (!keys.has(m[2])) continue;
    const start = m.index + m[1].length;
    parts.push(shape.slice(last, start), h('span', { class: 'changed-path' }, m[2]));
    last = start + m[2].length;
  }
  parts.push(shape.slice(last));
  return h('code', { class: 'mono' }, ...parts);
}

function shapeGroups(groups) {
  if (!groups.length) return emptyBox('No return-shape drift. A tool fires when a call returns a shape other than its stable baseline.');
  return groups.map((g) => h('article', { class: `card event worst-${g.ranking === 'breaking' ? 'BREAKING' : g.ranking === 'compatible' ? 'COMPATIBLE' : 'WARNING'}`, 'data-fingerprint': g.fingerprint },
    h('div', { class: 'event-head' }, h('strong', { class: 'mono' }, g.fingerprint),
      h('span', { class: `chip chip-${g.ranking === 'breaking' ? 'breaking' : g.ranking === 'compatible' ? 'compatible' : 'warning'}` }, g.ranking),
      h('span', { class: 'occurrences' }, `${g.occurrences} occurrences`)),
    h('p', {}, `${g.server} · ${g.tool} · first seen ${when(g.first_seen)} · last seen ${when(g.last_seen)} · sample span ${g.sample_span_id}`),
    h('div', { class: 'shape-pair' },
      h('div', { class: 'before' }, h('span', { class: 'box-label' }, `BASELINE ${g.baseline_hash}`), shapeWithPaths(g.baseline_shape, g.reasons)),
      h('div', { class: 'after' }, h('span', { class: 'box-label' }, `NEW ${g.shape_hash}`), shapeWithPaths(g.shape, g.reasons))),
    h('ul', {}, g.reasons.map((r) => h('li', { class: 'mono' }, describeReason(r))))));
}

function describeReason(r) {
  if (r.change === 'removed') return r.after ? `${r.path}: elements gone` : `${r.path}: removed`;
  if (r.change === 'added') return r.before ? `${r.path}: was empty, now populated` : `${r.path}: added`;
  return `${r.path}: ${r.before} -> ${r.after}`;
}

async function shapeDriftTab(server) {
  const drift = await get('/api/shape-drift?hours=720');
  return shapeGroups(server ? drift.groups.filter((g) => g.server === server) : drift.groups);
}

async function serverPage(server, tab) {
  const servers = await get('/api/health/servers');
  const info = servers.find((s) => s.server_name === server);
  const tabs = [['drift', 'Drift'], ['schema', 'Schema'], ['tools', 'Tools'], ['shape', 'Shape drift']];
  const body = await ({ drift: driftTab, schema: schemaTab, tools: toolsTab, shape: shapeDriftTab }[tab] || driftTab)(server);
  return [
    h('h1', {}, server, ' ', info ? statusChip(info.status) : null),
    info && typeof info.latency_ms === 'number' ? h('p', { class: 'probe-latency' }, `Last probe: ${probeLatency(info)}`) : null,
    info && info.note ? h('p', { class: 'note' }, info.note) : null,
    h('nav', { class: 'tabs', 'aria-label': 'Server' }, tabs.map(([id, label]) =>
      h('a', { href: `#/servers/${encodeURIComponent(server)}/${id}`, 'aria-current': id === tab ? 'page' : null, 'data-tab': id }, label))),
    h('section', { id: `tab-${tab}` }, body),
  ];
}

async function settingsPage() {
  const [view, stats] = await Promise.all([get('/api/settings/detector-thresholds'), get('/api/settings/return-value-stats?hours=24')]);
  const t = view.thresholds;
  const bounds = view.bounds;
  const field = (key, label) => [
    h('label', { for: key }, label),
    h('input', { id: key, name: key, type: 'number', value: String(t[key]), min: '1' }),
    h('span', { class: 'bounds' }, ` bounds ${JSON.stringify(bounds[key])}`),
  ];
  const message = h('div', { role: 'status' });
  const form = h('form', { class: 'settings card', id: 'thresholds', onsubmit: async (e) => {
    e.preventDefault();
    const body = {};
    for (const key of Object.keys(t)) {
      if (key !== 'baseline') body[key] = Number(form.elements[key].value);
    }
    body.baseline = form.elements.baseline.value;
    try {
      await api('/api/settings/detector-thresholds', { method: 'PUT', body: JSON.stringify(body) });
      message.replaceChildren(h('p', { class: 'form-ok' }, 'Saved.'));
    } catch (err) {
      message.replaceChildren(h('p', { class: 'form-error', role: 'alert' }, err.message));
    }
  } },
  h('h2', {}, 'Tool-list baseline policy'),
  h('label', { for: 'baseline' }, 'New tool lists'),
  h('select', { id: 'baseline', name: 'baseline' }, [
    ['compatible', 'compatible — accept at once when every change is COMPATIBLE'],
    ['manual', 'manual — every new tool list waits for an operator'],
    ['auto', 'auto — accept every new tool list at once (its event is kept)'],
  ].map(([value, label]) => h('option', { value, selected: t.baseline === value ? '' : null }, label))),
  h('h2', {}, 'Return-shape detector thresholds'),
  field('min_history_calls', 'Minimum history calls'),
  field('history_window', 'History window'),
  field('tool_return_value_max_bytes', 'Return value max bytes'),
  h('p', {}, h('button', { type: 'submit', class: 'primary' }, 'Save')), message);
  const rate = (stats.truncation_rate * 100).toFixed(1);
  const tile = h('div', { class: 'card tile', id: 'telemetry' },
    h('h2', {}, 'Return values (24h)'),
    h('div', { class: 'big', id: 'truncation-rate' }, `${rate}%`), h('div', {}, 'truncated by SDKs'),
    h('p', {}, `${stats.totals.successful_calls} successful calls · ${stats.totals.fingerprinted} fingerprinted · ${stats.totals.oversized} oversized · ${stats.totals.unparseable} unparseable · ${stats.totals.absent} absent`));
  return [h('h1', {}, 'Settings'), form, tile];
}

// ---------- routing ----------

async function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const section = parts[0] || 'servers';
  document.querySelectorAll('[data-nav]').forEach((a) =>
    a.setAttribute('aria-current', a.dataset.nav === (section === 'servers' ? 'servers' : section) ? 'page' : 'false'));
  show(h('p', { class: 'loading' }, 'Loading…'));
  try {
    let content;
    if (section === 'servers' && parts[1]) content = await serverPage(parts[1], parts[2] || 'drift');
    else if (section === 'tools') content = [h('h1', {}, 'Tools'), ...(await toolsTab(null))];
    else if (section === 'shape-drift') content = [h('h1', {}, 'Shape drift'), ...[await shapeDriftTab(null)].flat()];
    else if (section === 'settings') content = await settingsPage();
    else content = await serversPage();
    show(...[content].flat(2).filter(Boolean));
  } catch (err) {
    show(errorBox(err.message));
  }
}

document.getElementById('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const value = document.getElementById('api-key').value.trim();
  if (value) sessionStorage.setItem(KEY, value); else sessionStorage.removeItem(KEY);
  route();
});
if (sessionStorage.getItem(KEY)) document.getElementById('api-key').value = sessionStorage.getItem(KEY);
window.addEventListener('hashchange', route);
route();
