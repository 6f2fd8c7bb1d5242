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

// The same for SVG: attributes only, children are nodes or text (server text stays text here too).
const SVG_NS = 'http://www.w3.org/2000/svg';
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    el.setAttribute(name, String(value));
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

// `marks`: key names to highlight (the keys a shape reason names).
function jsonNode(value, indent = 0, marks = null) {
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
        out.push(inner); put(marks && marks.has(k) ? 'json-key changed-path' : 'json-key', JSON.stringify(k)); out.push(': ');
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
// Servers with tools whose returns, for now, mostly do not meet their declared outputSchema.
const contractChip = (info) => (info && info.contract_mismatches && info.contract_mismatches.length
  ? h('span', { class: 'chip contract-banner', title: 'most recent returns of these tools do not meet their declared outputSchema' },
    `returns mismatch declared output: ${info.contract_mismatches.join(', ')}`)
  : null);
const contractState = (state) => (state
  ? h('span', { class: `chip contract-state contract-${state}`, 'data-contract': state }, state)
  : h('span', { class: 'muted' }, '—'));
const probeLatency = (s) => (typeof s.latency_ms === 'number' ? `${Math.round(s.latency_ms)} ms` : '—');
// What a server's tools and instructions cost a model's context (o200k_base tokens).
const grouped = (n) => Number(n).toLocaleString('en-US');
const contextTokens = (s) => (s.context_cost ? `${grouped(s.context_cost.tokens)} tokens` : '—');

// Records the detector could not use, by kind — calls of tools beyond the project's limits among them:
// ingest answered 202 for those before the detector could tell, so the server list says so.
function deadLetterNotice(counts) {
  if (!counts || counts.length === 0) return null;
  return h('div', { class: 'dead-letters', id: 'dead-letters', role: 'status' },
    h('strong', {}, 'Not tracked by the detector'),
    counts.map((c) => h('div', { 'data-kind': c.kind },
      `${c.count} record${c.count === 1 ? '' : 's'} (${c.kind.replace(/_/g, ' ')}), the last ${when(c.last_at)}: ${c.last_reason}`)));
}

async function serversPage() {
  const [servers, dead, releases] = await Promise.all([
    get('/api/health/servers'), get('/api/health/dead-letters').catch(() => []), get('/api/upstream').catch(() => [])]);
  const notice = deadLetterNotice(dead);
  if (servers.length === 0) {
    return [h('h1', {}, 'Servers'), notice, emptyBox(
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
        s.max_severity === 'high' ? h('div', { class: 'security-banner' }, '⚠ high-severity security flag') : null,
        contractChip(s), releaseLine(s, releases)),
      h('td', {}, statusChip(s.status)),
      h('td', { class: 'mono' }, s.schema_hash || '—'),
      h('td', {}, String(s.tool_count)),
      h('td', { class: 'hide-narrow context-cost', title: 'tools and instructions in a model\'s context (o200k_base)' }, contextTokens(s)),
      h('td', { class: 'hide-narrow probe-latency' }, probeLatency(s)),
      h('td', { class: 'hide-narrow' }, when(s.last_seen)),
      h('td', { class: 'open-drift', title: 'open events, and the changes in them by classification' }, openDriftText(s)),
    );
  });
  const healthy = servers.filter((s) => s.status === 'UP').length;
  return [
    h('h1', {}, 'Servers'),
    notice,
    h('p', {}, `${healthy}/${servers.length} servers healthy`),
    h('div', { class: 'table-wrap' }, h('table', { id: 'servers' },
      h('thead', {}, h('tr', {}, ['Server', 'Status', 'Schema hash', 'Tools', 'Context', 'Probe', 'Last seen', 'Open drift'].map((t, i) =>
        h('th', { class: i >= 4 && i <= 6 ? 'hide-narrow' : null }, t)))),
      h('tbody', {}, rows))),
  ];
}

// One vocabulary for drift counts, in the server list and the Drift tab alike: how many open *events*, then
// the *changes* inside them by classification (an event with three changes is one event, three changes).
const openEventsLabel = (events) => `${events} open event${events === 1 ? '' : 's'}:`;

function summaryChips(events) {
  const open = events.filter((e) => e.status === 'open');
  // Changes an event found but did not list (`omitted_changes`) count too.
  const count = (c) => open.flatMap((e) => e.changes).filter((ch) => ch.classification === c).length
    + open.reduce((n, e) => n + ((e.omitted_changes || {})[c] || 0), 0);
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

// What the tool's current input schema says of an agent's real calls (the CLI's words, src/cli/client.rs).
function realCalls(c) {
  const a = c.arguments;
  if (!a) return 'no recorded arguments';
  if (a.rejected_calls > 0) {
    return `${a.rejected_calls} of ${c.call_count} calls would be rejected${a.reasons.length ? ` — ${a.reasons[0]}` : ''}`;
  }
  if (a.unknown_calls > 0) return `${a.accepted_calls} of ${c.call_count} calls accepted, ${a.unknown_calls} with arguments not recorded or not checkable`;
  return `all ${a.accepted_calls} calls accepted`;
}

function impactTable(impact) {
  if (!impact.consumers.length) return h('p', { class: 'no-callers' }, impact.message || 'No recent callers — tool may be unused.');
  return h('div', { class: 'table-wrap' }, h('table', { class: 'impact-table' },
    h('thead', {}, h('tr', {}, ['Agent', 'Calls', 'Errors', 'Avg latency', 'Real calls', 'Risk'].map((t) => h('th', {}, t)))),
    h('tbody', {}, impact.consumers.map((c) => h('tr', {},
      h('td', {}, c.agent_name), h('td', {}, String(c.call_count)), h('td', {}, String(c.error_count)),
      h('td', {}, `${Math.round(c.avg_latency_ms)} ms`),
      h('td', { class: c.arguments && c.arguments.rejected_calls > 0 ? 'real-calls rejected' : 'real-calls' }, realCalls(c)),
      h('td', { class: `risk-${c.risk}` }, c.risk))))));
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

// An event lists at most so many changes of each kind; the rest are counted, by classification.
function unlistedNote(event) {
  const omitted = event.omitted_changes || {};
  const parts = ['BREAKING', 'WARNING', 'COMPATIBLE'].filter((c) => omitted[c] > 0)
    .map((c) => `${omitted[c]} ${c.toLowerCase()}`);
  if (!parts.length) return null;
  const total = Object.values(omitted).reduce((a, b) => a + b, 0);
  return h('p', { class: 'unlisted', 'data-unlisted': String(total) },
    `… and ${total} more change${total === 1 ? '' : 's'} not listed (${parts.join(', ')}). `
    + 'Compare the full schemas below.');
}

function eventCard(server, event, onAccepted) {
  const worst = event.max_classification || 'COMPATIBLE';
  const status = event.status === 'accepted'
    ? `accepted by ${event.accepted_by || '?'} · ${when(event.accepted_at)}`
    : event.status;
  const impactBox = h('div', { class: 'impact' }, h('h3', {}, 'Affected agents (24h)'), h('p', { class: 'loading' }, 'Loading…'));
  // Server-wide changes (instructions, context cost) name no tool.
  const tools = [...new Set(event.changes.map((c) => c.tool_name).filter(Boolean))];
  Promise.all(tools.map(async (tool) => {
    try {
      const impact = await get(`/api/health/servers/${encodeURIComponent(server)}/drift-impact?tool_name=${encodeURIComponent(tool)}&hours=24`);
      return h('div', { class: 'impact-tool', 'data-tool': tool }, h('strong', {}, tool), impactTable(impact));
    } catch (err) {
      return errorBox(`${tool}: ${err.message}`);
    }
  })).then((parts) => impactBox.replaceChildren(h('h3', {}, 'Affected agents (24h)'), ...parts));

  const lists = (e) => [
    h('div', {}, h('span', { class: 'box-label' }, 'BEFORE'), jsonNode(e.previous_tools)),
    h('div', {}, h('span', { class: 'box-label' }, 'AFTER'), jsonNode(e.current_tools))];
  // A long history answers with the lists of its newest events only: an older event's come on request.
  const schemas = h('div', { class: 'schemas', hidden: true },
    ...(event.lists_omitted ? [h('p', { class: 'loading' }, 'Loading…')] : lists(event)));
  let pending = event.lists_omitted;
  const toggle = h('button', { type: 'button', 'aria-expanded': 'false', class: 'toggle-schemas', onclick: async () => {
    schemas.hidden = !schemas.hidden;
    toggle.setAttribute('aria-expanded', String(!schemas.hidden));
    if (!pending || schemas.hidden) return;
    pending = false;
    try {
      const whole = await get(`/api/health/servers/${encodeURIComponent(server)}/drift-events/${encodeURIComponent(event.id)}`);
      schemas.replaceChildren(...lists(whole));
    } catch (err) {
      pending = true;
      schemas.replaceChildren(errorBox(err.message));
    }
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
    unlistedNote(event),
    event.context_cost ? h('p', { class: 'context-cost' },
      `Context cost (o200k_base): ${grouped(event.context_cost.before.tokens)} → ${grouped(event.context_cost.after.tokens)} tokens, ${event.context_cost.summary}`) : null,
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

// What the server shows the model besides its tools: instructions, prompts, resources, resource templates.
function surfacesNodes(surfaces) {
  const list = (title, kind, items, label, detail) => items && items.length
    ? h('section', { class: 'surfaces', 'data-surface': kind }, h('h3', {}, `${title} (${items.length})`),
      items.map((item) => h('details', { class: 'card surface', 'data-name': label(item) },
        h('summary', {}, h('strong', {}, label(item)), ` — ${item.description || item.title || 'no description'}`),
        detail(item),
        h('details', { class: 'raw' }, h('summary', {}, 'raw JSON'), jsonNode(item)))))
    : null;
  const args = (prompt) => (prompt.arguments || []).length
    ? h('div', { class: 'params' }, prompt.arguments.map((a) => h('div', { class: 'param' },
      h('code', {}, String(a.name)), ' ', h('span', { class: `badge ${a.required ? 'required' : 'optional'}` }, a.required ? 'required' : 'optional'),
      a.description ? h('div', {}, a.description) : null)))
    : h('p', { class: 'note' }, 'no arguments');
  const where = (key) => (item) => h('p', {}, h('code', {}, String(item[key] || '')), item.mimeType ? ` · ${item.mimeType}` : '');
  return [
    surfaces.instructions != null
      ? h('section', { class: 'surfaces', 'data-surface': 'instructions' }, h('h3', {}, 'Instructions'), h('pre', { class: 'instructions' }, surfaces.instructions))
      : null,
    list('Prompts', 'prompts', surfaces.prompts, (p) => String(p.name), args),
    list('Resources', 'resources', surfaces.resources, (r) => String(r.name || r.uri), where('uri')),
    list('Resource templates', 'resourceTemplates', surfaces.resourceTemplates, (r) => String(r.name || r.uriTemplate), where('uriTemplate')),
  ].filter(Boolean);
}

async function schemaTab(server) {
  const [tools, surfaces] = await Promise.all([
    get(`/api/servers/${encodeURIComponent(server)}/tools`),
    get(`/api/servers/${encodeURIComponent(server)}/surfaces`),
  ]);
  const note = h('p', { class: 'note schema-note' }, 'Only tools captured from a tool list appear here; tools seen only in traces are in the Tools tab.');
  const others = surfacesNodes(surfaces);
  if (!tools.length) return [note, emptyBox(`No tool list captured for ${server} yet.`), others];
  const sorted = [...tools].sort((a, b) => a.tool_name.localeCompare(b.tool_name));
  return [note, sorted.map((t) => h('details', { class: 'card tool', 'data-tool': t.tool_name },
    h('summary', {}, h('strong', {}, t.tool_name), ` — ${t.description || 'no description'} · ${Object.keys(t.input_schema.properties || {}).length} parameters`),
    paramCards(t.input_schema),
    h('details', { class: 'raw' }, h('summary', {}, 'raw JSON'), jsonNode(t.input_schema)))), others];
}

function toolsTable(tools, showServer) {
  if (!tools.length) return emptyBox('No tool calls seen yet. Send spans to POST /v1/spans.');
  return h('div', { class: 'table-wrap' }, h('table', { id: 'tools' },
    h('thead', {}, h('tr', {}, [showServer ? 'Server' : null, 'Tool', 'Calls', 'Errors', 'Avg latency', 'Shape status', 'Declared', 'Contract']
      .filter(Boolean).map((t) => h('th', {}, t)))),
    h('tbody', {}, tools.map((t) => h('tr', { 'data-tool': t.tool },
      showServer ? h('td', {}, t.server) : null,
      h('td', {}, h('a', { href: `#/servers/${encodeURIComponent(t.server)}/timeline/${encodeURIComponent(t.tool)}`,
        title: 'timeline of this tool' }, t.tool)),
      h('td', {}, String(t.calls)), h('td', {}, String(t.errors)),
      h('td', {}, `${Math.round(t.avg_latency_ms)} ms`), h('td', { class: 'mono shape-status' }, t.shape_status),
      h('td', {}, t.declared ? 'yes' : 'no — seen only in traces'),
      h('td', { class: 'contract' }, contractState(t.contract)))))));
}

async function toolsTab(server) {
  const tools = await get('/api/tools?hours=720');
  return [toolsTable(server ? tools.filter((t) => t.server === server) : tools, !server)];
}

// Wraps the keys named by the reasons' paths in the shape text.
function shapeWithPaths(shape, reasons) {
  const keys = reasonKeys(reasons);
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

// The key names a list of shape reasons points at (the last segment of each path).
const reasonKeys = (reasons) => new Set((reasons || []).map((r) => String(r.path || '').replace(/\[\]/g, '').split('.').pop())
  .filter((k) => k && k !== '(root)'));

// A declared schema as the API gives it (canonical JSON text), pretty-printed; the text itself otherwise.
function declaredSchemaNode(text, reasons) {
  try { return jsonNode(JSON.parse(text), 0, reasonKeys(reasons)); } catch { return h('code', { class: 'mono' }, text); }
}

const KIND_LABEL = { shape_drift: 'shape drift', declared_output_mismatch: 'declared output mismatch', drift_event: 'tool-list drift' };
const kindChip = (kind) => h('span', { class: `chip kind-chip kind-${kind}`, 'data-kind': kind }, KIND_LABEL[kind] || kind);

function shapeGroups(groups) {
  if (!groups.length) return emptyBox('No return-shape drift. A tool fires when a call returns a shape other than its stable baseline.');
  return groups.map((g) => {
    const kind = g.kind || 'shape_drift';
    const declared = kind === 'declared_output_mismatch';
    return h('article', { class: `card event worst-${g.ranking === 'breaking' ? 'BREAKING' : g.ranking === 'compatible' ? 'COMPATIBLE' : 'WARNING'}`, 'data-fingerprint': g.fingerprint, 'data-kind': kind },
      h('div', { class: 'event-head' }, h('strong', { class: 'mono' }, g.fingerprint),
        kindChip(kind),
        h('span', { class: `chip chip-${g.ranking === 'breaking' ? 'breaking' : g.ranking === 'compatible' ? 'compatible' : 'warning'}` }, g.ranking),
        h('span', { class: 'occurrences' }, `${g.occurrences} occurrences`)),
      h('p', {}, `${g.server} · `, h('a', { href: `#/servers/${encodeURIComponent(g.server)}/timeline/${encodeURIComponent(g.tool)}` }, g.tool),
        ` · first seen ${when(g.first_seen)} · last seen ${when(g.last_seen)} · sample span ${g.sample_span_id}`),
      h('div', { class: 'shape-pair' },
        declared
          ? h('div', { class: 'before declared' }, h('span', { class: 'box-label' }, `DECLARED ${g.baseline_hash}`), declaredSchemaNode(g.baseline_shape, g.reasons))
          : h('div', { class: 'before' }, h('span', { class: 'box-label' }, `BASELINE ${g.baseline_hash}`), shapeWithPaths(g.baseline_shape, g.reasons)),
        h('div', { class: 'after' }, h('span', { class: 'box-label' }, `NEW ${g.shape_hash}`), shapeWithPaths(g.shape, g.reasons))),
      h('ul', {}, g.reasons.map((r) => h('li', { class: 'mono' }, describeReason(r)))));
  });
}

function describeReason(r) {
  if (r.detail) return `${r.path}: ${r.detail}`;
  if (r.change === 'removed') return r.after ? `${r.path}: elements gone` : `${r.path}: removed`;
  if (r.change === 'added') return r.before ? `${r.path}: was empty, now populated` : `${r.path}: added`;
  return `${r.path}: ${r.before} -> ${r.after}`;
}

async function shapeDriftTab(server) {
  const drift = await get('/api/shape-drift?hours=720');
  return shapeGroups(server ? drift.groups.filter((g) => g.server === server) : drift.groups);
}

// ---------- timeline: calls, latency and shape share over time, with drift markers ----------

const WINDOWS = [[1, '1 h'], [6, '6 h'], [24, '24 h'], [168, '7 d'], [720, '30 d']];
let timelineHours = 6; // kept while moving between tools and servers

function duration(seconds) {
  if (seconds % 86400 === 0) return `${seconds / 86400} d`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

const ms = (ts) => new Date(ts).getTime();
const fmtMs = (v) => (v >= 1000 ? `${+(v / 1000).toFixed(v >= 10000 ? 0 : 1)} s` : `${Math.round(v)} ms`);

// A round step (1, 2 or 5 × 10^k) giving about `ticks` intervals up to `max`.
function niceTicks(max, ticks = 4, integer = false) {
  const top = Math.max(max, integer ? 1 : 1e-9);
  const raw = top / ticks;
  const exp = 10 ** Math.floor(Math.log10(raw));
  const f = raw / exp;
  let step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * exp;
  if (integer) step = Math.max(1, Math.round(step));
  const end = Math.ceil(top / step - 1e-9) * step;
  const values = [];
  for (let v = 0; v <= end + step / 2; v += step) values.push(+v.toFixed(6));
  return values;
}

// Time ticks at round local times, as many as fit in `width` pixels.
const TICK_STEPS = [60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800].map((x) => x * 1000);
function timeTicks(from, to, width) {
  const span = to - from;
  const long = span > 2 * 86400_000;
  const fit = Math.max(2, Math.floor(width / (long ? 90 : 70)));
  const step = TICK_STEPS.find((st) => span / st <= fit) || TICK_STEPS[TICK_STEPS.length - 1];
  const local = -new Date(from).getTimezoneOffset() * 60_000;
  const out = [];
  for (let t = Math.ceil((from + local) / step) * step - local; t <= to; t += step) {
    const d = new Date(t);
    const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    const day = d.toLocaleDateString([], { month: 'short', day: 'numeric' });
    out.push([t, !long ? time : step >= 86400_000 ? day : `${day} ${time}`]);
  }
  return out;
}

const SEVERITY_CLASS = {
  BREAKING: 'breaking', breaking: 'breaking', WARNING: 'warning', indeterminate: 'warning',
  COMPATIBLE: 'compatible', compatible: 'compatible',
};
const severityClass = (severity) => SEVERITY_CLASS[severity] || 'none';

// One chart: `series` are [{ name, kind: 'bar'|'line', values: [number|null per bucket], cls }].
function chart({ id, title, data, width, height, series, yTicks, yLabel, pointTitle }) {
  const m = { left: 52, right: 12, top: 12, bottom: 24 };
  const from = ms(data.from), to = ms(data.to);
  const bucketMs = data.bucket_seconds * 1000;
  const plotW = Math.max(40, width - m.left - m.right), plotH = height - m.top - m.bottom;
  const x = (t) => m.left + ((Math.min(Math.max(t, from), to) - from) / (to - from || 1)) * plotW;
  const yMax = yTicks[yTicks.length - 1] || 1;
  const y = (v) => m.top + plotH - (v / yMax) * plotH;
  const fix = (v) => +v.toFixed(2);
  const svg = s('svg', { class: 'chart-svg', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img',
    'aria-label': title, 'data-chart': id });

  const grid = s('g', { class: 'grid' });
  for (const v of yTicks) {
    grid.append(s('line', { x1: m.left, x2: m.left + plotW, y1: fix(y(v)), y2: fix(y(v)), class: v === 0 ? 'baseline' : null }),
      s('text', { x: m.left - 6, y: fix(y(v)) + 4, 'text-anchor': 'end', class: 'axis-label y-label' }, yLabel(v)));
  }
  for (const [t, label] of timeTicks(from, to, plotW)) {
    grid.append(s('line', { x1: fix(x(t)), x2: fix(x(t)), y1: m.top + plotH, y2: m.top + plotH + 4, class: 'tick' }),
      s('text', { x: fix(x(t)), y: height - 6, 'text-anchor': 'middle', class: 'axis-label x-label' }, label));
  }
  svg.append(grid);

  const center = (b) => ms(b.start) + bucketMs / 2;
  const slot = (bucketMs / (to - from || 1)) * plotW;
  for (const line of series) {
    const g = s('g', { class: `series series-${line.name}` });
    if (line.kind === 'bar') {
      const w = Math.max(1, Math.min(slot * (line.barWidth || 0.7), 28));
      data.buckets.forEach((b, i) => {
        const v = line.values[i] || 0;
        const cx = center(b);
        g.append(s('rect', { class: `point bar ${line.cls}${v === 0 ? ' zero' : ''}`, 'data-series': line.name, 'data-start': b.start,
          'data-value': v, 'data-x': fix(x(cx)), x: fix(x(cx) - w / 2), width: fix(w), y: fix(y(v)), height: fix(m.top + plotH - y(v)) },
        s('title', {}, pointTitle(b, line))));
      });
    } else {
      // Line segments only between neighbouring buckets that both have a value: a gap stays a gap.
      let d = '';
      line.values.forEach((v, i) => {
        if (v === null || v === undefined) return;
        const prev = i > 0 ? line.values[i - 1] : null;
        d += `${prev === null || prev === undefined ? 'M' : 'L'}${fix(x(center(data.buckets[i])))},${fix(y(v))}`;
      });
      if (d) g.append(s('path', { d, class: `line ${line.cls}` }));
      data.buckets.forEach((b, i) => {
        const v = line.values[i];
        if (v === null || v === undefined) return;
        g.append(s('circle', { class: `point ${line.cls}`, 'data-series': line.name, 'data-start': b.start, 'data-value': v,
          'data-x': fix(x(center(b))), cx: fix(x(center(b))), cy: fix(y(v)), r: line.r || 3 }, s('title', {}, pointTitle(b, line))));
      });
    }
    svg.append(g);
  }

  const marks = s('g', { class: 'markers' });
  for (const mk of data.markers) {
    const mx = fix(x(ms(mk.at)));
    const sev = severityClass(mk.severity);
    const tip = `${when(mk.at)} · ${KIND_LABEL[mk.kind] || mk.kind} · ${mk.label}`;
    marks.append(s('g', { class: `marker-group sev-${sev}` },
      s('line', { class: 'marker-hit', x1: mx, x2: mx, y1: m.top, y2: m.top + plotH }, s('title', {}, tip)),
      s('line', { class: `marker sev-${sev}`, 'data-kind': mk.kind, 'data-id': mk.id, 'data-severity': mk.severity,
        x1: mx, x2: mx, y1: m.top, y2: m.top + plotH }, s('title', {}, tip)),
      s('path', { class: `marker-head sev-${sev}`, d: `M${mx - 4},${m.top - 6}L${mx + 4},${m.top - 6}L${mx},${m.top}Z` }, s('title', {}, tip))));
  }
  svg.append(marks);

  const legend = h('div', { class: 'legend' }, [...series].sort((a, b) => (a.legend || 0) - (b.legend || 0)).map((line) => h('span', { class: 'legend-item' },
    h('span', { class: `swatch ${line.cls}` }), line.label)));
  return h('figure', { class: 'chart', id: `chart-${id}` }, h('figcaption', {}, h('strong', {}, title), legend), svg);
}

function timelineCharts(data, width) {
  const b = data.buckets;
  const per = duration(data.bucket_seconds);
  const count = (v) => String(v);
  const calls = b.map((x) => x.calls), errors = b.map((x) => x.errors);
  const p50 = b.map((x) => (x.calls > 0 && typeof x.p50_ms === 'number' ? x.p50_ms : null));
  const p95 = b.map((x) => (x.calls > 0 && typeof x.p95_ms === 'number' ? x.p95_ms : null));
  const share = b.map((x) => (typeof x.dominant_share === 'number' ? x.dominant_share * 100 : null));
  const span = (x) => `${when(x.start)} (+${per})`;
  const narrow = width < 500;
  return [
    chart({ id: 'calls', title: `Calls and errors per ${per}`, data, width, height: narrow ? 150 : 170,
      yTicks: niceTicks(Math.max(1, ...calls), narrow ? 3 : 4, true), yLabel: count,
      series: [
        { name: 'calls', label: 'calls', kind: 'bar', cls: 's-calls', values: calls },
        { name: 'errors', label: 'errors', kind: 'bar', cls: 's-errors', values: errors, barWidth: 0.4 },
      ],
      pointTitle: (x) => `${span(x)}: ${x.calls} call${x.calls === 1 ? '' : 's'}, ${x.errors} error${x.errors === 1 ? '' : 's'}` }),
    chart({ id: 'latency', title: 'Latency', data, width, height: narrow ? 150 : 170,
      yTicks: niceTicks(Math.max(1, ...p95.filter((v) => v !== null), ...p50.filter((v) => v !== null)), narrow ? 3 : 4), yLabel: fmtMs,
      series: [
        // p95 first, as a ring, so that a p50 dot on the same value stays visible inside it.
        { name: 'p95', label: 'p95', kind: 'line', cls: 's-p95', values: p95, r: 4.5, legend: 1 },
        { name: 'p50', label: 'p50', kind: 'line', cls: 's-p50', values: p50 },
      ],
      pointTitle: (x, line) => `${span(x)}: ${line.name} ${fmtMs(line.name === 'p50' ? x.p50_ms : x.p95_ms)} over ${x.calls} call${x.calls === 1 ? '' : 's'}` }),
    chart({ id: 'share', title: 'Share of the dominant return shape', data, width, height: narrow ? 120 : 140,
      yTicks: [0, 50, 100], yLabel: (v) => `${v}%`,
      series: [{ name: 'share', label: 'dominant shape', kind: 'line', cls: 's-share', values: share }],
      pointTitle: (x) => `${span(x)}: ${Math.round(x.dominant_share * 100)}% of ${x.fingerprinted} fingerprinted return${x.fingerprinted === 1 ? '' : 's'}` }),
  ];
}

function markerList(server, markers) {
  if (!markers.length) return h('p', { class: 'note', id: 'timeline-markers' }, 'No drift events or shape signals in this window.');
  return h('ol', { id: 'timeline-markers', class: 'marker-list' }, markers.map((mk) => h('li', { 'data-kind': mk.kind, 'data-id': mk.id, class: `sev-line-${severityClass(mk.severity)}` },
    h('div', { class: 'marker-meta' },
      h('span', { class: 'marker-time' }, when(mk.at)),
      h('a', { href: `#/servers/${encodeURIComponent(server)}/${mk.kind === 'drift_event' ? 'drift' : 'shape'}`, title: 'open it' }, kindChip(mk.kind)),
      h('span', { class: `chip chip-${severityClass(mk.severity)}` }, mk.severity)),
    h('div', { class: 'marker-label' }, mk.label))));
}

// The chart area's width in pixels, before it is in the page: the main column less its padding and a card's.
function chartWidth() {
  const style = getComputedStyle(main);
  const inner = main.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return Math.max(260, Math.floor(inner - 2 * 17));
}

function timelineView(server, data) {
  const total = data.buckets.reduce((a, b) => a + b.calls, 0);
  const errors = data.buckets.reduce((a, b) => a + b.errors, 0);
  const charts = h('div', { class: 'charts' });
  let drawn = 0;
  const draw = (width) => { drawn = width; charts.replaceChildren(...timelineCharts(data, width)); };
  draw(chartWidth());
  // Redrawn at the width it really gets (and when the window is resized), not scaled.
  const watch = new ResizeObserver((entries) => {
    if (!charts.isConnected) { watch.disconnect(); return; }
    const width = Math.floor(entries[0].contentRect.width);
    if (width > 0 && Math.abs(width - drawn) > 8) draw(width);
  });
  watch.observe(charts);
  return h('div', { class: 'timeline', id: 'timeline', 'data-hours': data.hours, 'data-buckets': data.buckets.length, 'data-from': data.from,
    'data-bucket-seconds': data.bucket_seconds },
  h('p', { class: 'timeline-summary' },
    `${total} call${total === 1 ? '' : 's'} · ${errors} error${errors === 1 ? '' : 's'} · ${data.buckets.length} buckets of ${duration(data.bucket_seconds)} · ${when(data.from)} – ${when(data.to)}`),
  total === 0 ? h('p', { class: 'note' }, 'No calls in this window.') : null,
  h('div', { class: 'card chart-card' }, charts),
  h('h2', {}, 'Markers'),
  markerList(server, data.markers));
}

function contractPanel(server, tool, report) {
  const panel = (...children) => h('section', { class: 'card contract-panel', id: 'contract' }, h('h2', {}, 'Declared vs observed'), ...children);
  if (!report) return panel(h('p', {}, `${tool} has neither a declared output schema nor calls on ${server}.`));
  const c = report.contract;
  const observed = report.observed_shape
    ? h('div', { class: 'box observed-shape' },
      h('span', { class: 'box-label' }, `OBSERVED ${report.observed_hash || ''}${typeof report.observed_share === 'number' ? ` · ${Math.round(report.observed_share * 100)}% of recent returns` : ''}`),
      // Only what the observed shape itself gets wrong is marked in it (an agreeing shape has nothing marked).
      shapeWithPaths(report.observed_shape, report.disagreements || []))
    : h('div', { class: 'box observed-shape' }, h('span', { class: 'box-label' }, 'OBSERVED'),
      h('p', {}, 'No dominant return shape yet (too few calls, or no single shape dominates).'));
  if (!c) {
    return panel(h('p', { class: 'no-contract' }, `${tool} declares no output schema (no outputSchema in ${server}'s accepted tool list): there is nothing to check its returns against.`),
      h('div', { class: 'shape-pair single' }, observed));
  }
  const reasons = (list) => h('ul', {}, list.map((r) => h('li', { class: 'mono' }, describeReason(r))));
  const verdict = report.agrees === true
    ? h('p', { class: 'verdict verdict-agrees' }, 'The declared schema admits the observed dominant shape.')
    : report.agrees === false
      ? h('div', { class: 'verdict verdict-mismatch' }, h('p', {}, 'The observed dominant shape does not meet the declared schema:'), reasons(report.disagreements || []))
      : h('p', { class: 'verdict' }, 'Not known yet whether the declared schema admits what the tool returns.');
  const last = c.last_mismatch;
  return panel(
    h('div', { class: 'contract-head' }, contractState(c.state),
      h('span', { class: 'contract-counts' },
        h('span', { 'data-count': 'checked' }, `${c.checked} checked`), ' · ',
        h('span', { 'data-count': 'mismatched' }, `${c.mismatched} mismatched`), ' · ',
        h('span', { 'data-count': 'inconclusive' }, `${c.inconclusive} inconclusive`), ' · ',
        h('span', { 'data-count': 'window' }, `${c.window_mismatches}/${c.window_size} of the last calls mismatched`))),
    h('div', { class: 'shape-pair contract-pair' },
      h('div', { class: 'box declared-schema' }, h('span', { class: 'box-label' }, `DECLARED ${c.declared_hash} · ${when(c.declared_at)}`),
        jsonNode(c.declared_schema, 0, reasonKeys([...(report.disagreements || []), ...((last && last.reasons) || [])]))),
      observed),
    verdict,
    last ? h('div', { class: 'last-mismatch' },
      h('h3', {}, 'Last mismatch'),
      h('p', {}, `${when(last.at)} · span ${last.span_id}`),
      h('div', { class: 'box mismatch-box' }, h('span', { class: 'box-label' }, 'RETURNED'), shapeWithPaths(last.shape, last.reasons)),
      reasons(last.reasons)) : h('p', { class: 'note' }, 'No call has mismatched the declared schema.'),
    report.signal_groups && report.signal_groups.length ? [h('h3', {}, 'Mismatch signals'), shapeGroups(report.signal_groups)] : null);
}

async function timelineTab(server, tool) {
  const base = tool
    ? `/api/tools/${encodeURIComponent(server)}/${encodeURIComponent(tool)}`
    : `/api/health/servers/${encodeURIComponent(server)}`;
  const [tools, contract] = await Promise.all([
    get('/api/tools?hours=720').then((all) => all.filter((t) => t.server === server).map((t) => t.tool)),
    tool ? get(`${base}/contract`).catch((err) => (err.status === 404 ? null : err)) : null,
  ]);
  const names = [...new Set([...tools, ...(tool ? [tool] : [])])].sort();
  const picker = h('select', { id: 'timeline-tool', onchange: (e) => {
    const t = e.target.value;
    location.hash = `#/servers/${encodeURIComponent(server)}/timeline${t ? `/${encodeURIComponent(t)}` : ''}`;
  } }, h('option', { value: '', selected: tool ? null : '' }, 'All tools'),
  names.map((t) => h('option', { value: t, selected: t === tool ? '' : null }, t)));
  const area = h('div', { class: 'timeline-area' }, h('p', { class: 'loading' }, 'Loading…'));
  let asked = 0;
  const load = async () => {
    const mine = ++asked;
    area.setAttribute('aria-busy', 'true');
    try {
      const data = await get(`${base}/timeline?hours=${timelineHours}`);
      if (mine === asked) area.replaceChildren(timelineView(server, data));
    } catch (err) {
      if (mine === asked) area.replaceChildren(errorBox(err.message));
    } finally {
      if (mine === asked) area.removeAttribute('aria-busy');
    }
  };
  const windowSelect = h('select', { id: 'timeline-hours', onchange: (e) => { timelineHours = Number(e.target.value); load(); } },
    WINDOWS.map(([hours, label]) => h('option', { value: String(hours), selected: hours === timelineHours ? '' : null }, label)));
  await load();
  return [
    h('div', { class: 'timeline-controls' },
      h('label', {}, 'Tool ', picker), h('label', {}, 'Window ', windowSelect)),
    area,
    tool ? (contract instanceof Error ? errorBox(`contract: ${contract.message}`) : contractPanel(server, tool, contract)) : null,
  ];
}

async function serverPage(server, tab, tool) {
  const servers = await get('/api/health/servers');
  const info = servers.find((s) => s.server_name === server);
  const tabs = [['drift', 'Drift'], ['schema', 'Schema'], ['tools', 'Tools'], ['shape', 'Shape drift'], ['timeline', 'Timeline']];
  const pages = { drift: driftTab, schema: schemaTab, tools: toolsTab, shape: shapeDriftTab, timeline: timelineTab };
  if (!pages[tab]) tab = 'drift';
  const body = await pages[tab](server, tool);
  return [
    h('h1', {}, server, ' ', info ? statusChip(info.status) : null),
    info ? contractChip(info) : null,
    info && typeof info.latency_ms === 'number' ? h('p', { class: 'probe-latency' }, `Last probe: ${probeLatency(info)}`) : null,
    info && info.context_cost ? h('p', { class: 'context-cost' },
      `Context cost: ${contextTokens(info)} (o200k_base), ${grouped(info.context_cost.bytes)} bytes — tools and instructions`) : null,
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
  const field = (key, label, min = '1') => [
    h('label', { for: key }, label),
    h('input', { id: key, name: key, type: 'number', value: String(t[key]), min }),
    h('span', { class: 'bounds' }, ` bounds ${JSON.stringify(bounds[key])}`),
  ];
  const message = h('div', { role: 'status' });
  const form = h('form', { class: 'settings card', id: 'thresholds', onsubmit: async (e) => {
    e.preventDefault();
    const body = {};
    const choices = ['baseline', 'security_hold'];
    const switches = ['argument_shapes'];
    for (const key of Object.keys(t)) {
      if (!choices.includes(key) && !switches.includes(key)) body[key] = Number(form.elements[key].value);
    }
    for (const key of choices) body[key] = form.elements[key].value;
    for (const key of switches) body[key] = form.elements[key].checked;
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
  h('label', { for: 'security_hold' }, 'Hold for review'),
  h('select', { id: 'security_hold', name: 'security_hold' }, [
    ['medium', 'medium — a change with a security flag of medium or high waits for a person'],
    ['high', 'high — only high-severity flags hold a change'],
  ].map(([value, label]) => h('option', { value, selected: t.security_hold === value ? '' : null }, label))),
  h('h2', {}, 'Real calls'),
  h('label', { for: 'argument_shapes', class: 'switch' },
    h('input', { id: 'argument_shapes', name: 'argument_shapes', type: 'checkbox', checked: t.argument_shapes === true }),
    ' Keep the shapes of the arguments calls send (keys and kinds, never a value), to tell which calls a new input schema rejects'),
  h('h2', {}, 'Context cost'),
  h('p', { class: 'muted' }, 'A new tool list whose tools and instructions grow a model\'s context past either limit is a WARNING change (0: off).'),
  field('context_growth_tokens', 'Growth in tokens', '0'),
  field('context_growth_percent', 'Growth in percent', '0'),
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

// ---------- upcoming releases (the upstream watcher) ----------

// Under a server's name: the release in use and the newest seen, with its verdict.
function releaseLine(server, releases) {
  const newest = releases.find((r) => r.server_name === server.server_name);
  if (!newest) return null;
  const inUse = releaseInUse(server, releases);
  const text = inUse === newest.version ? `release ${inUse} (newest)` : `release ${inUse || '?'} → ${newest.version} (${releaseVerdict(newest)})`;
  return h('div', { class: 'release-line' },
    h('a', { href: `#/upcoming/${encodeURIComponent(server.server_name)}`, onclick: (e) => e.stopPropagation() }, text));
}

// The release whose list is the server's current list is the one it runs, as far as its list tells.
function releaseInUse(server, releases) {
  const found = server && server.schema_hash
    ? releases.find((r) => !r.error && r.server_name === server.server_name && r.release_hash === server.schema_hash)
    : null;
  return found ? found.version : null;
}

const releaseVerdict = (r) => (r.error ? 'not captured' : (r.max_classification || 'no change'));

function verdictChip(r) {
  const verdict = releaseVerdict(r);
  return h('span', { class: `badge ${r.error ? 'not-captured' : (r.max_classification || 'none')}`, 'data-verdict': verdict }, verdict);
}

async function upcomingPage() {
  const [releases, servers] = await Promise.all([get('/api/upstream'), get('/api/health/servers')]);
  if (!releases.length) {
    return [h('h1', {}, 'Upcoming releases'), emptyBox(
      'No releases seen yet. Name a server\'s package in an [[upstream]] entry of the configuration and driftline',
      'captures each new release in a sandbox and shows here what it would change before your agents run it.',
      'See "Watch a server\'s next release" in the README.')];
  }
  const newest = new Map();
  for (const r of releases) if (!newest.has(r.server_name)) newest.set(r.server_name, r);
  const rows = [...newest.values()].map((r) => {
    const inUse = releaseInUse(servers.find((s) => s.server_name === r.server_name), releases);
    return h('tr', { 'data-server': r.server_name },
      h('td', {}, h('a', { href: `#/upcoming/${encodeURIComponent(r.server_name)}` }, r.server_name)),
      h('td', { class: 'mono' }, r.package),
      h('td', { class: 'in-use' }, inUse || '?'),
      h('td', { class: 'newest' }, r.version),
      h('td', {}, when(r.released_at)),
      h('td', {}, verdictChip(r)),
      h('td', { class: 'mono' }, r.pin || '—'));
  });
  return [h('h1', {}, 'Upcoming releases'),
    h('p', { class: 'muted' }, 'Each watched server\'s newest release, captured in a sandbox and compared with what the server runs now. The server\'s status does not change.'),
    h('div', { class: 'table-wrap' }, h('table', { id: 'upcoming' },
      h('thead', {}, h('tr', {}, ['Server', 'Package', 'In use', 'Newest', 'Released', 'Verdict', 'Pin to stay'].map((t) => h('th', {}, t)))),
      h('tbody', {}, rows)))];
}

function releaseCard(server, release, impact, onAccepted) {
  const accept = !release.error && release.max_classification ? h('button', { type: 'button', class: 'primary accept-ahead', onclick: async () => {
    if (!confirm(`Accept ${release.package} ${release.version} ahead? When ${server} runs it, its list becomes the baseline.`)) return;
    accept.disabled = true;
    try {
      await api(`/api/upstream/${encodeURIComponent(server)}/accept`, { method: 'POST', body: JSON.stringify({ version: release.version }) });
      accept.replaceWith(h('p', { class: 'form-ok', role: 'status' }, `Accepted ahead: ${release.version} becomes the baseline when ${server} runs it.`));
      onAccepted();
    } catch (err) {
      accept.disabled = false;
      accept.after(errorBox(err.message));
    }
  } }, 'Accept ahead') : null;
  return h('article', { class: `card release worst-${release.max_classification || 'none'}`, 'data-version': release.version },
    h('div', { class: 'event-head' },
      h('strong', {}, `${release.package} ${release.version}`), ' ', verdictChip(release),
      h('span', {}, `released ${when(release.released_at)} · captured ${when(release.detected_at)}`),
      release.max_severity === 'high' ? h('span', { class: 'security-banner' }, '⚠ high-severity security flag') : null),
    release.error ? h('div', { class: 'error release-error', role: 'note' }, `Not captured: ${release.error}`) : null,
    !release.error && !release.changes.length ? h('p', {}, release.baseline_hash
      ? 'Same tools as the baseline.' : 'The server had no baseline to compare with.') : null,
    release.changes.map((c) => changeView(c, release.detected_at)),
    unlistedNote(release),
    release.context_cost ? h('p', { class: 'context-cost' }, `Context cost (o200k_base): ${release.context_cost.summary}`) : null,
    release.pin && release.max_classification ? h('p', { class: 'pin' }, 'To stay on the version in use, pin it: ', h('code', {}, release.pin)) : null,
    impact ? h('div', { class: 'impact', id: 'upcoming-impact' }, h('h3', {}, `Whose calls it would break (${impact.hours} h)`),
      impact.impact.length ? impact.impact.map((i) => h('div', { class: 'impact-tool', 'data-tool': i.tool_name },
        h('strong', {}, i.tool_name),
        h('span', { class: 'consequence' }, i.removed
          ? ` · removed: all ${i.rejected_calls} calls would fail`
          : ` · ${i.rejected_calls} calls the new input schema would reject`),
        impactTable(i.impact))) : h('p', { class: 'no-callers' }, 'No recent calls of the tools it changes.')) : null,
    h('div', { class: 'actions' }, accept));
}

async function upcomingServerPage(server) {
  const page = await get(`/api/upstream/${encodeURIComponent(server)}?hours=24`);
  if (!page.releases.length) return [h('h1', {}, `${server} — upcoming`), emptyBox(`No release of ${server}'s package seen yet.`)];
  return [h('h1', {}, `${server} — upcoming`),
    h('p', {}, h('a', { href: '#/upcoming' }, '← all servers'), ' · ', h('a', { href: `#/servers/${encodeURIComponent(server)}/drift` }, 'the server now')),
    page.releases.map((r, i) => releaseCard(server, r, i === 0 ? page : null, () => {}))];
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
    // #/servers/NAME[/TAB[/TOOL]]: the tool only for the Timeline tab.
    if (section === 'servers' && parts[1]) content = await serverPage(parts[1], parts[2] || 'drift', parts[3] || null);
    else if (section === 'tools') content = [h('h1', {}, 'Tools'), ...(await toolsTab(null))];
    else if (section === 'shape-drift') content = [h('h1', {}, 'Shape drift'), ...[await shapeDriftTab(null)].flat()];
    else if (section === 'upcoming') content = parts[1] ? await upcomingServerPage(parts[1]) : await upcomingPage();
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
