// Dashboard tests: `driftline serve` loaded with `driftline demo --keep-drift`, looked at in Debian's
// headless Chromium through playwright-core. Screenshots of every tab go to target/screenshots/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { createServer } from 'node:http';
import { chromium } from 'playwright-core';

const BIN = process.env.DRIFTLINE_BIN || path.resolve('../../target/debug/driftline');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = path.resolve(process.env.SCREENSHOT_DIR || '../../target/screenshots');

let server, url, browser, dataDir;
const offsite = [];

// `driftline serve` on a free port with its data in `dir`: the process, and a promise of its address.
function spawnServe(dir, extraArgs = [], extraEnv = {}) {
  const proc = spawn(BIN, ['serve', '--bind', '127.0.0.1:0', '--data-dir', dir, ...extraArgs], {
    stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, DRIFTLINE__LOG__LEVEL: 'warn', ...extraEnv },
  });
  const address = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('driftline serve did not start within 30 s')), 30_000);
    createInterface({ input: proc.stdout }).once('line', (line) => {
      clearTimeout(timer);
      resolve(line.replace('driftline listening on ', '').trim());
    });
    proc.once('exit', (code) => reject(new Error(`driftline serve exited with ${code}`)));
  });
  return { proc, address };
}

async function startServer() {
  dataDir = mkdtempSync(path.join(tmpdir(), 'driftline-ui-'));
  let address;
  ({ proc: server, address } = spawnServe(dataDir));
  url = await address;
}

async function newPage(width = 1280, height = 900) {
  const page = await browser.newPage({ viewport: { width, height } });
  page.on('request', (request) => {
    if (!request.url().startsWith(url)) offsite.push(request.url());
  });
  page.on('dialog', (dialog) => dialog.accept());
  return page;
}

async function shot(page, name) {
  const file = path.join(SHOTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  await startServer();
  execFileSync(BIN, ['demo', '--keep-drift', '--url', url], { stdio: 'ignore' });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  server?.kill();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  console.log(`screenshots in ${SHOTS}`);
});

test('servers page lists both demo servers with status, hash, tools and open drift', async () => {
  const page = await newPage();
  await page.goto(url);
  await page.waitForSelector('#servers tbody tr');
  const rows = await page.locator('#servers tbody tr').evaluateAll((trs) => trs.map((tr) => tr.innerText));
  assert.equal(rows.length, 2);
  assert.match(rows[0], /search-mcp[\s\S]*DEGRADED[\s\S]*[0-9a-f]{8}[\s\S]*4[\s\S]*1 open event: 1 breaking · 1 warning · 1 compatible/);
  assert.match(rows[0], /high-severity security flag/);
  assert.match(rows[1], /weather-mcp[\s\S]*UP[\s\S]*2/);
  assert.equal(await page.locator('.status-DEGRADED').count(), 1);
  assert.equal(await page.locator('.status-UP').count(), 1);
  // What each server's tools and instructions cost a model's context: the API's figure.
  const health = await (await fetch(`${url}/api/health/servers`)).json();
  const tokens = health.map((s) => `${s.context_cost.tokens.toLocaleString('en-US')} tokens`);
  assert.ok(health.every((s) => s.context_cost.tokens > 10), JSON.stringify(health));
  assert.deepEqual(await page.locator('#servers tbody td.context-cost').allInnerTexts(), tokens);
  await page.locator('#servers tbody tr').first().focus();
  await page.keyboard.press('Enter');
  await page.waitForSelector('#tab-drift');
  assert.match(page.url(), /#\/servers\/search-mcp\/drift$/);
  console.log(`servers: ${await shot(page, 'servers')}`);
});

test('drift tab: chips, colored cards, badges, before/after, flags, affected agents, full schemas', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/servers/search-mcp/drift`);
  await page.waitForSelector('.impact-tool');
  const chips = await page.locator('#summary-chips .chip').allInnerTexts();
  assert.deepEqual(chips, ['1 breaking', '1 warning', '1 compatible']);
  assert.equal(await page.locator('#summary-chips .chips-label').innerText(), '1 open event:');
  const card = page.locator('article.event').first();
  assert.match(await card.getAttribute('class'), /worst-BREAKING/);
  const border = await card.evaluate((el) => getComputedStyle(el).borderLeftColor);
  assert.equal(border, 'rgb(217, 48, 37)');
  assert.equal(await card.locator('.alert-icon').count(), 1);
  const kinds = await card.locator('.change .badge.kind').allInnerTexts();
  assert.deepEqual(kinds, ['description_changed', 'tool_added', 'required_param_added']);
  const breaking = card.locator('[data-change="required_param_added"]');
  assert.match(await breaking.locator('.before').innerText(), /BEFORE\s+null/);
  assert.match(await breaking.locator('.after').innerText(), /"required": true/);
  assert.equal(await breaking.locator('.before').evaluate((el) => getComputedStyle(el).backgroundColor), 'rgb(253, 236, 234)');
  assert.equal(await breaking.locator('.after').evaluate((el) => getComputedStyle(el).backgroundColor), 'rgb(230, 244, 234)');
  const flags = await card.locator('[data-change="description_changed"] .flag').allInnerTexts();
  assert.equal(flags.length, 3);
  assert.match(flags.join('\n'), /hidden_instruction_tag \(high\)/);
  const planner = await card.locator('[data-tool="search_web"] .impact-table tbody tr').allInnerTexts();
  assert.equal(planner.length, 2);
  assert.match(planner[0], /planner\s+24\s+0\s+\d+ ms\s+24 of 24 calls would be rejected — filters: required by the declared schema, missing\s+HIGH/);
  assert.match(planner[1], /researcher\s+3\s+1\s+\d+ ms\s+all 3 calls accepted\s+MEDIUM/);
  assert.equal(await card.locator('[data-tool="search_web"] .real-calls.rejected').count(), 1);
  assert.match(await card.locator('[data-tool="fetch_page"]').innerText(), /No recent callers — tool may be unused\./);
  // The event's context cost: the poisoned description is longer, the new tool adds its own.
  const [event] = await (await fetch(`${url}/api/health/servers/search-mcp/drift-history?limit=1`)).json();
  const cost = event.context_cost;
  assert.ok(cost.after.tokens > cost.before.tokens, JSON.stringify(cost));
  assert.equal(await card.locator('p.context-cost').innerText(),
    `Context cost (o200k_base): ${cost.before.tokens.toLocaleString('en-US')} → ${cost.after.tokens.toLocaleString('en-US')} tokens, ${cost.summary}`);
  assert.match(cost.summary, /^\+\d+ tokens \(\+[\d.]+ %\): 1 tool added, 1 description longer/);
  assert.match(await page.locator('h1 ~ p.context-cost').innerText(), /^Context cost: [\d,]+ tokens \(o200k_base\), [\d,]+ bytes/);
  // Highlighting classes and colours of the JSON view.
  const schemas = card.locator('.schemas');
  assert.equal(await schemas.isVisible(), false, 'full schemas start collapsed');
  await card.locator('.toggle-schemas').click();
  assert.equal(await schemas.isVisible(), true);
  for (const [cls, color] of [['json-key', 'rgb(75, 72, 200)'], ['json-string', 'rgb(30, 142, 62)'], ['json-number', 'rgb(181, 129, 0)']]) {
    assert.ok(await schemas.locator(`.${cls}`).count() > 0, `no ${cls}`);
    assert.equal(await schemas.locator(`.${cls}`).first().evaluate((el) => getComputedStyle(el).color), color);
  }
  console.log(`drift: ${await shot(page, 'drift')}`);
});

test('schema tab: alphabetical tools, parameter cards, required badges, enum chips, raw JSON', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/servers/search-mcp/schema`);
  await page.waitForSelector('details.tool');
  const names = await page.locator('details.tool').evaluateAll((ds) => ds.map((d) => d.dataset.tool));
  assert.deepEqual(names, ['fetch_page', 'search_images', 'search_web', 'summarize']);
  const search = page.locator('details.tool[data-tool="search_web"]');
  await search.locator(':scope > summary').click();
  const filters = search.locator('[data-param="filters"]');
  assert.match(await filters.innerText(), /filters\s+object\s+required/);
  assert.match(await search.locator('[data-param="limit"]').innerText(), /limit\s+integer\s+optional/);
  assert.deepEqual(await search.locator('[data-param="safe_search"] .enum-chip').allInnerTexts(), ['off', 'moderate', 'strict']);
  assert.equal(await search.locator('.param-name').first().evaluate((el) => getComputedStyle(el).color), 'rgb(75, 72, 200)');
  await search.locator('details.raw > summary').click();
  assert.ok(await search.locator('details.raw .json-key').count() > 0);
  assert.match(await page.locator('.schema-note').innerText(), /Only tools captured from a tool list appear here/);
  console.log(`schema: ${await shot(page, 'schema')}`);
});

test('schema tab: instructions, prompts with their arguments, resources and templates, hostile text shown as text', async () => {
  const list = {
    tools: [{ name: 'query', inputSchema: { type: 'object', properties: { sql: { type: 'string' } } } }],
    instructions: 'Use query for reads only.\n<img src=x onerror="window.pwned=1">',
    prompts: [{ name: 'review_code', description: 'Reviews a diff', arguments: [
      { name: 'diff', required: true, description: 'the unified diff' }, { name: 'style' }] }],
    resources: [{ uri: 'db://schema', name: 'schema', mimeType: 'application/json', description: 'the database schema' }],
    resourceTemplates: [{ uriTemplate: 'db://tables/{table}', name: 'table', description: 'one table' }],
  };
  const put = await fetch(`${url}/api/servers/docs-mcp/tools`, {
    method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(list),
  });
  assert.equal(put.status, 202, await put.text());
  const page = await newPage();
  // The detector applies the list shortly after it is accepted: reload until the prompts show (bounded).
  const deadline = Date.now() + 20_000;
  for (;;) {
    await page.goto(`${url}/#/servers/docs-mcp/schema`);
    await page.waitForSelector('.schema-note');
    if (await page.locator('[data-surface="prompts"]').count() > 0) break;
    assert.ok(Date.now() < deadline, 'the prompts of docs-mcp did not appear on its Schema tab within 20 s');
    await page.waitForTimeout(250);
  }
  assert.match(await page.locator('pre.instructions').innerText(), /Use query for reads only\.\n<img src=x onerror="window\.pwned=1">/);
  assert.equal(await page.evaluate(() => window.pwned), undefined, 'instructions were rendered as markup');
  assert.match(await page.locator('[data-surface="prompts"] h3').innerText(), /Prompts \(1\)/);
  const prompt = page.locator('details.surface[data-name="review_code"]');
  await prompt.locator(':scope > summary').click();
  assert.match(await prompt.innerText(), /diff\s+required[\s\S]*style\s+optional/);
  assert.match(await page.locator('[data-surface="resources"]').innerText(), /schema — the database schema/);
  await page.locator('details.surface[data-name="schema"] > summary').click();
  assert.match(await page.locator('details.surface[data-name="schema"]').innerText(), /db:\/\/schema · application\/json/);
  assert.match(await page.locator('[data-surface="resourceTemplates"]').innerText(), /Resource templates \(1\)[\s\S]*table — one table/);
  console.log(`schema surfaces: ${await shot(page, 'schema-surfaces')}`);
});

test('tools and shape drift tabs show the demo calls and the forecast shape change', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/tools`);
  await page.waitForSelector('#tools tbody tr');
  const rows = await page.locator('#tools tbody tr').allInnerTexts();
  assert.equal(rows.length, 2);
  assert.match(rows.join('\n'), /weather-mcp\s+get_forecast\s+23\s+0[\s\S]*stable · 2f700a60 · 86%/);
  assert.match(rows.join('\n'), /search-mcp\s+search_web\s+27\s+1/);
  console.log(`tools: ${await shot(page, 'tools')}`);
  await page.goto(`${url}/#/shape-drift`);
  await page.waitForSelector('[data-fingerprint]');
  const group = page.locator('[data-fingerprint="tool_schema_drift:get_forecast:08ed04f6"]');
  assert.match(await group.innerText(), /breaking[\s\S]*3 occurrences/);
  assert.deepEqual(await group.locator('.changed-path').allInnerTexts(), ['temp_c', 'temp']);
  console.log(`shape drift: ${await shot(page, 'shape-drift')}`);
});

test('settings: bounds shown, a bad value explained, the truncation tile', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/settings`);
  await page.waitForSelector('#thresholds');
  assert.match(await page.locator('#thresholds').innerText(), /bounds \[2,1000\]/);
  await page.fill('#history_window', '5');
  await page.click('#thresholds button[type=submit]');
  await page.waitForSelector('.form-error');
  assert.match(await page.locator('.form-error').innerText(), /history_window = 5 is out of bounds/);
  assert.equal(await page.locator('#truncation-rate').innerText(), '0.0%');
  console.log(`settings: ${await shot(page, 'settings')}`);
});

test('settings: the baseline policy is chosen per project and saved', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/settings`);
  await page.waitForSelector('#baseline');
  assert.equal(await page.locator('#baseline').inputValue(), 'compatible', 'the default policy');
  assert.equal(await page.locator('#security_hold').inputValue(), 'medium', 'the default hold');
  assert.equal(await page.locator('#argument_shapes').isChecked(), true, 'argument shapes kept by default');
  assert.equal(await page.locator('#context_growth_percent').inputValue(), '0', 'context growth off by default');
  await page.fill('#context_growth_percent', '25');
  await page.selectOption('#baseline', 'manual');
  await page.selectOption('#security_hold', 'high');
  await page.locator('#argument_shapes').uncheck();
  await page.click('#thresholds button[type=submit]');
  await page.waitForSelector('.form-ok');
  const saved = await (await fetch(`${url}/api/settings/detector-thresholds`)).json();
  assert.equal(saved.thresholds.baseline, 'manual');
  assert.equal(saved.thresholds.security_hold, 'high');
  assert.equal(saved.thresholds.argument_shapes, false);
  assert.equal(saved.thresholds.context_growth_percent, 25);
  assert.equal(saved.thresholds.context_growth_tokens, 0);
  await page.reload();
  await page.waitForSelector('#baseline');
  assert.equal(await page.locator('#baseline').inputValue(), 'manual');
  assert.equal(await page.locator('#security_hold').inputValue(), 'high');
  assert.equal(await page.locator('#argument_shapes').isChecked(), false);
  assert.equal(await page.locator('#context_growth_percent').inputValue(), '25');
  await page.fill('#context_growth_percent', '0');
  await page.selectOption('#baseline', 'compatible');
  await page.selectOption('#security_hold', 'medium');
  await page.click('#thresholds button[type=submit]');
  await page.waitForSelector('.form-ok');
});

test('an SDK upgrade that changes nothing for clients is in history, accepted, and the server UP', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/servers/weather-mcp/drift`);
  await page.waitForSelector('article.event');
  await page.waitForSelector('h1 .status-UP');
  assert.match(await page.locator('article.event .event-status').first().innerText(), /accepted by auto/);
  assert.deepEqual(await page.locator('article.event .badge.kind').allInnerTexts(), ['title_changed', 'title_changed']);
  assert.equal(await page.locator('button.accept').count(), 0);
  console.log(`sdk upgrade: ${await shot(page, 'sdk-upgrade')}`);
});

test('a page on another origin cannot accept a baseline or send spans (local mode)', async () => {
  // The attacker's page, served from another origin: an auto-submitting form and a no-cors fetch, the two
  // requests a browser sends cross-site without asking.
  const attack = `<!doctype html><html><body>
    <form id="f" method="POST" action="${url}/api/health/servers/search-mcp/drift-accept" enctype="text/plain">
      <input name='{"x":"' value='"}'></form>
    <script>
      fetch('${url}/v1/spans', { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
        body: JSON.stringify([{ span_id: 'forged', session_id: 's', agent_name: 'forger', server: 'search-mcp',
          tool: 'forged_tool', started_at: new Date().toISOString(), duration_ms: 1, status: 'success' }]) })
        .catch(() => {}).finally(() => { document.title = 'sent'; document.getElementById('f').submit(); });
    </script></body></html>`;
  const evil = createServer((req, res) => { res.writeHead(200, { 'Content-Type': 'text/html' }); res.end(attack); });
  await new Promise((resolve) => evil.listen(0, '127.0.0.1', resolve));
  // "localhost" and 127.0.0.1 are different origins (and different sites to the browser).
  const evilUrl = `http://localhost:${evil.address().port}/`;
  const page = await browser.newPage();
  try {
    await page.goto(evilUrl);
    await page.waitForURL(/drift-accept/, { timeout: 10_000 });
    assert.match(await page.content(), /cross-origin request refused|cross-site request refused/);
  } finally {
    await page.close();
    evil.close();
  }
  const health = await fetch(`${url}/api/health/servers/search-mcp`).then((r) => r.json());
  assert.equal(health.status, 'DEGRADED', 'the poisoned list is still waiting for review');
  const tools = await fetch(`${url}/api/tools`).then((r) => r.json());
  assert.ok(!tools.some((t) => t.tool === 'forged_tool'), 'no forged span was stored');
});

test('accepting the baseline turns the server UP and keeps the event, marked accepted', async () => {
  const page = await newPage();
  await page.goto(`${url}/#/servers/search-mcp/drift`);
  await page.waitForSelector('button.accept');
  await page.click('button.accept');
  await page.waitForSelector('h1 .status-UP');
  const status = await page.locator('article.event .event-status').first().innerText();
  assert.match(status, /accepted by local/);
  assert.equal(await page.locator('button.accept').count(), 0);
  assert.equal(await page.locator('#summary-chips .chip').count(), 0, 'no open drift: no chips');
  console.log(`accepted: ${await shot(page, 'accepted')}`);
});

// ---------- timelines and declared vs observed ----------

const getJson = async (path) => {
  const response = await fetch(`${url}${path}`);
  assert.equal(response.status, 200, `GET ${path}: ${response.status}`);
  return response.json();
};

// Opens a timeline and reads the API answer it drew. Buckets are aligned to their size, so a bucket boundary
// passing between the page's request and the test's moves the window: then both are asked again.
async function openTimeline(page, hash, apiPath, hours) {
  for (let attempt = 0; ; attempt++) {
    await page.goto(`${url}/${hash}`);
    await page.waitForSelector(`#timeline[data-hours="${hours}"]`);
    const data = await getJson(apiPath);
    if (await page.locator('#timeline').getAttribute('data-from') === data.from) return data;
    assert.ok(attempt < 3, 'the window kept moving');
  }
}

// What each chart of the page drew: its points by series, its markers.
const drawn = (page) => page.evaluate(() => {
  const charts = {};
  for (const svg of document.querySelectorAll('svg[data-chart]')) {
    const points = {};
    for (const p of svg.querySelectorAll('.point')) {
      (points[p.dataset.series] ||= []).push({ start: p.dataset.start, value: Number(p.dataset.value), x: Number(p.dataset.x) });
    }
    const markers = [...svg.querySelectorAll('line.marker')].map((l) => ({ kind: l.dataset.kind, id: l.dataset.id,
      x: Number(l.getAttribute('x1')), title: l.querySelector('title')?.textContent }));
    charts[svg.dataset.chart] = { points, markers };
  }
  return charts;
});

function assertChartsMatch(charts, data) {
  assert.deepEqual(Object.keys(charts).sort(), ['calls', 'latency', 'share']);
  const starts = (list) => (list || []).map((p) => p.start);
  const withValue = (key) => data.buckets.filter((b) => b.calls > 0 && b[key] !== null).map((b) => b.start);
  assert.equal(charts.calls.points.calls.length, data.buckets.length, 'one calls point per bucket');
  assert.deepEqual(starts(charts.calls.points.calls), data.buckets.map((b) => b.start));
  assert.deepEqual(charts.calls.points.calls.map((p) => p.value), data.buckets.map((b) => b.calls));
  assert.deepEqual(charts.calls.points.errors.map((p) => p.value), data.buckets.map((b) => b.errors));
  assert.deepEqual(starts(charts.latency.points.p50), withValue('p50_ms'), 'one p50 point per bucket with calls');
  assert.deepEqual(starts(charts.latency.points.p95), withValue('p95_ms'), 'one p95 point per bucket with calls');
  assert.deepEqual(starts(charts.share.points.share), data.buckets.filter((b) => b.dominant_share !== null).map((b) => b.start),
    'one share point per bucket with a share');
  for (const [name, chart] of Object.entries(charts)) {
    assert.deepEqual(chart.markers.map((m) => `${m.kind}:${m.id}`), data.markers.map((m) => `${m.kind}:${m.id}`),
      `${name}: one marker per API marker`);
    chart.markers.forEach((m, i) => assert.match(m.title, new RegExp(data.markers[i].label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))));
  }
}

test('tool timeline: calls, latency and shape share per bucket, every marker in every chart', async () => {
  const page = await newPage();
  const data = await openTimeline(page, '#/servers/weather-mcp/timeline/get_forecast',
    '/api/tools/weather-mcp/get_forecast/timeline?hours=6', 6);
  assert.equal(data.bucket_seconds, 600, '6 h in buckets of 10 min by default');
  assert.ok(data.buckets.some((b) => b.calls > 0), 'the demo calls are in the window');
  assert.ok(data.buckets.some((b) => b.p50_ms !== null) && data.buckets.some((b) => b.dominant_share !== null));
  const charts = await drawn(page);
  assertChartsMatch(charts, data);
  // The return-shape change of the last forecasts is drawn after the first bucket's point.
  const signal = data.markers.findIndex((m) => m.kind === 'shape_drift');
  assert.ok(signal >= 0, `a shape_drift marker: ${JSON.stringify(data.markers)}`);
  for (const chart of Object.values(charts)) {
    assert.ok(chart.markers[signal].x > charts.calls.points.calls[0].x, 'the signal marker is right of the first bucket');
  }
  assert.equal(await page.locator('#timeline-tool').inputValue(), 'get_forecast');
  assert.equal(await page.locator('#timeline-hours').inputValue(), '6');
  assert.equal(await page.locator('nav.tabs [data-tab="timeline"]').getAttribute('aria-current'), 'page');
  assert.deepEqual(await page.locator('#timeline-markers li').evaluateAll((lis) => lis.map((li) => li.dataset.id)),
    data.markers.map((m) => m.id), 'the list below names every marker');
  console.log(`tool timeline: ${await shot(page, 'timeline-tool')}`);
});

test('tool timeline: declared output schema next to the observed shape, with the contract counts', async () => {
  const report = await getJson('/api/tools/weather-mcp/get_forecast/contract');
  assert.ok(report.contract, 'get_forecast declares an outputSchema in the demo');
  const page = await newPage();
  await page.goto(`${url}/#/servers/weather-mcp/timeline/get_forecast`);
  const panel = page.locator('#contract');
  await panel.waitFor();
  assert.match(await panel.locator('h2').innerText(), /Declared vs observed/);
  const declared = await panel.locator('.declared-schema').innerText();
  assert.match(declared, /"temp_c"/);
  assert.match(declared, new RegExp(`DECLARED ${report.contract.declared_hash}`));
  assert.equal(await panel.locator('.observed-shape code').innerText(), report.observed_shape);
  assert.equal(await panel.locator('.contract-state').innerText(), report.contract.state);
  assert.equal(report.contract.state, 'agrees');
  assert.equal(await panel.locator('[data-count="mismatched"]').innerText(), `${report.contract.mismatched} mismatched`);
  assert.equal(report.contract.mismatched, 3);
  assert.equal(await panel.locator('[data-count="checked"]').innerText(), `${report.contract.checked} checked`);
  // The last mismatch, and the key it misses highlighted in the declaration; the observed shape agrees, so
  // nothing is marked in it.
  const last = report.contract.last_mismatch;
  assert.match(await panel.locator('.last-mismatch').innerText(), new RegExp(`span ${last.span_id}[\\s\\S]*${last.shape.replace(/[{}[\]]/g, '\\$&')}`));
  assert.match(await panel.locator('.last-mismatch').innerText(), /temp_c: required by the declared schema, missing/);
  assert.deepEqual(await panel.locator('.declared-schema .changed-path').allInnerTexts(), ['"temp_c"']);
  assert.deepEqual(await panel.locator('.observed-shape .changed-path').allInnerTexts(), []);
  // The Tools table says the same in its Contract column; a tool without outputSchema shows a dash.
  await page.goto(`${url}/#/servers/weather-mcp/tools`);
  await page.waitForSelector('#tools tbody tr');
  assert.equal(await page.locator('#tools tr[data-tool="get_forecast"] td.contract').innerText(), 'agrees');
  const search = await getJson('/api/tools?hours=720');
  assert.equal(search.find((t) => t.tool === 'search_web').contract, undefined);
  await page.goto(`${url}/#/servers/search-mcp/timeline/search_web`);
  await page.locator('#contract').waitFor();
  assert.match(await page.locator('#contract').innerText(), /declares no output schema/);
});

test('server timeline: all the tools of search-mcp, with its tool-list drift marker', async () => {
  const page = await newPage();
  const data = await openTimeline(page, '#/servers/search-mcp/timeline', '/api/health/servers/search-mcp/timeline?hours=6', 6);
  assert.equal(data.tool, null);
  assert.ok(data.markers.some((m) => m.kind === 'drift_event'), `a drift_event marker: ${JSON.stringify(data.markers)}`);
  const charts = await drawn(page);
  assertChartsMatch(charts, data);
  for (const chart of Object.values(charts)) {
    assert.equal(chart.markers.filter((m) => m.kind === 'drift_event').length, data.markers.filter((m) => m.kind === 'drift_event').length);
  }
  assert.equal(await page.locator('#timeline-tool').inputValue(), '', 'all tools');
  assert.equal(await page.locator('#contract').count(), 0, 'no contract panel for a whole server');
  assert.equal(await page.locator('#timeline-markers li[data-kind="drift_event"]').count(), data.markers.filter((m) => m.kind === 'drift_event').length);
  console.log(`server timeline: ${await shot(page, 'timeline-server')}`);
  // The picker opens one tool's timeline.
  await page.selectOption('#timeline-tool', 'search_web');
  await page.waitForURL(/#\/servers\/search-mcp\/timeline\/search_web$/);
  await page.waitForSelector('#timeline');
  assert.equal(await page.locator('#timeline-tool').inputValue(), 'search_web');
});

test('timeline: another window redraws with the buckets of that window', async () => {
  const page = await newPage();
  await openTimeline(page, '#/servers/weather-mcp/timeline/get_forecast', '/api/tools/weather-mcp/get_forecast/timeline?hours=6', 6);
  await page.selectOption('#timeline-hours', '24');
  await page.waitForSelector('#timeline[data-hours="24"]');
  let data = await getJson('/api/tools/weather-mcp/get_forecast/timeline?hours=24');
  if (await page.locator('#timeline').getAttribute('data-from') !== data.from) {
    data = await openTimeline(page, '#/servers/weather-mcp/timeline/get_forecast', '/api/tools/weather-mcp/get_forecast/timeline?hours=24', 24);
  }
  // 48 buckets of 30 min cover 24 h; one more because the window's ends are aligned to bucket bounds.
  assert.equal(data.buckets.length, 49, '24 h in buckets of 30 min by default');
  assert.equal(data.bucket_seconds, 1800);
  assertChartsMatch(await drawn(page), data);
  assert.equal(await page.locator('#timeline').getAttribute('data-buckets'), '49');
});

test('timeline at 390 px: charts fit the width', async () => {
  const page = await newPage(390, 844);
  await page.goto(`${url}/#/servers/weather-mcp/timeline/get_forecast`);
  await page.waitForSelector('#timeline svg[data-chart="share"]');
  await page.locator('#contract').waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(overflow <= 390, `page is ${overflow} px wide at 390`);
  const svgWidth = await page.locator('svg[data-chart="calls"]').evaluate((el) => el.getBoundingClientRect().width);
  assert.ok(svgWidth > 250 && svgWidth <= 390, `chart is ${svgWidth} px wide`);
  console.log(`narrow timeline: ${await shot(page, 'narrow-timeline')}`);
});

test('usable at 390 px and makes no request outside the server', async () => {
  const page = await newPage(390, 844);
  await page.goto(`${url}/#/servers/search-mcp/drift`);
  await page.waitForSelector('article.event');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(overflow <= 390, `page is ${overflow} px wide at 390`);
  console.log(`narrow: ${await shot(page, 'narrow-drift')}`);
  assert.deepEqual(offsite, []);
});

test('a probed stdio server shows its probe latency in the list and on its page', async () => {
  // A second driftline with one [[probe.servers]] entry: the catalog server of tests/mcp over stdio.
  const python = process.env.DRIFTLINE_TEST_PYTHON || path.resolve('../../target/python-env/bin/python');
  const probeDir = mkdtempSync(path.join(tmpdir(), 'driftline-ui-probe-'));
  const config = path.join(probeDir, 'driftline.toml');
  writeFileSync(config, [
    '[probe]', 'interval_seconds = 2', 'timeout_seconds = 20', '',
    '[[probe.servers]]', 'name = "catalog"', `command = ${JSON.stringify(python)}`,
    `args = [${JSON.stringify(path.resolve('../mcp/catalog_server.py'))}, "--state", ${JSON.stringify(probeDir)}]`, '',
  ].join('\n'));
  const { proc: probed, address: probedAddress } = spawnServe(probeDir, ['--config', config]);
  try {
    const probedUrl = await probedAddress;
    // Not newPage(): its requests go to this second server, which is not "outside" for the test above.
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    // The page does not refresh by itself: wait for the first probe through the API, then load it.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const health = await fetch(`${probedUrl}/api/health/servers/catalog`).then((r) => (r.ok ? r.json() : null), () => null);
      if (health?.status === 'UP') break;
      assert.ok(Date.now() < deadline, `the catalog server is not UP within 30 s: ${JSON.stringify(health)}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await page.goto(probedUrl);
    await page.waitForSelector('#servers tbody tr[data-server="catalog"] .status-UP');
    assert.match(await page.locator('#servers tbody tr .probe-latency').innerText(), /^\d+ ms$/);
    await page.goto(`${probedUrl}/#/servers/catalog/drift`);
    assert.match(await page.locator('p.probe-latency').innerText({ timeout: 10_000 }), /^Last probe: \d+ ms$/);
    console.log(`probed: ${await shot(page, 'probed-server')}`);
  } finally {
    probed.kill();
    rmSync(probeDir, { recursive: true, force: true });
  }
});

test('the server list and the Drift tab count open drift the same way', async () => {
  const page = await newPage();
  await page.goto(url);
  await page.waitForSelector('#servers tbody tr');
  for (const server of await page.locator('#servers tbody tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.server))) {
    await page.goto(url);
    await page.waitForSelector('#servers tbody tr');
    const listed = (await page.locator(`#servers tbody tr[data-server="${server}"] .open-drift`).innerText()).trim();
    await page.goto(`${url}/#/servers/${encodeURIComponent(server)}/drift`);
    await page.waitForSelector('#tab-drift');
    const label = await page.locator('#summary-chips .chips-label').allInnerTexts();
    const chips = Object.fromEntries(await page.locator('#summary-chips .chip').evaluateAll((els) =>
      els.map((el) => [el.dataset.chip, el.innerText.split(' ')[0]])));
    const shown = label.length
      ? `${label[0]} ${chips.breaking || 0} breaking · ${chips.warning || 0} warning · ${chips.compatible || 0} compatible`
      : 'none';
    assert.equal(shown, listed, `${server}: the list says "${listed}", the Drift tab "${shown}"`);
    const openCards = await page.locator('article.event.open').count();
    assert.equal(listed === 'none' ? 0 : Number(listed.split(' ')[0]), openCards, `${server}: open event cards`);
  }
});

test('a tool whose returns mismatch its declared output: server chip, Contract column, signal card, panel', async () => {
  // Its own driftline: a tool declaring a numeric price that returns it as a string.
  const dir = mkdtempSync(path.join(tmpdir(), 'driftline-ui-contract-'));
  const { proc: own, address } = spawnServe(dir);
  try {
    const base = await address;
    const send = async (method, where, body) => {
      const response = await fetch(`${base}${where}`, { method, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      assert.ok(response.ok, `${method} ${where}: ${response.status}`);
    };
    const poll = async (what, where, done) => {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const body = await fetch(`${base}${where}`).then((r) => (r.ok ? r.json() : null), () => null);
        if (body && done(body)) return body;
        assert.ok(Date.now() < deadline, `${what} within 30 s: ${JSON.stringify(body)}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    };
    await send('PUT', '/api/servers/stocks-mcp/tools', [{ name: 'quote', description: 'A quote.',
      inputSchema: { type: 'object', properties: { sym: { type: 'string' } } },
      outputSchema: { type: 'object', properties: { sym: { type: 'string' }, price: { type: 'number' } }, required: ['sym', 'price'] } }]);
    await poll('the declaration', '/api/tools/stocks-mcp/quote/contract', (r) => r.contract);
    const now = Date.now();
    await send('POST', '/v1/spans', Array.from({ length: 15 }, (_, i) => ({ span_id: `q-${i}`, trace_id: 't', session_id: `s-${i}`,
      agent_name: 'trader', server: 'stocks-mcp', tool: 'quote', started_at: new Date(now - (150 - i * 10) * 60_000).toISOString(),
      duration_ms: 100 + i * 7, status: 'success', return_value: { sym: 'ACME', price: '12.5' } })));
    const report = await poll('the mismatch', '/api/tools/stocks-mcp/quote/contract',
      (r) => r.contract?.state === 'mismatch' && r.signal_groups.length > 0);
    await poll('the server flag', '/api/health/servers', (list) => list[0]?.contract_mismatches?.length > 0);
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(base);
    await page.waitForSelector('#servers tbody tr');
    assert.equal(await page.locator('#servers tr[data-server="stocks-mcp"] .contract-banner').innerText(), 'returns mismatch declared output: quote');
    await page.goto(`${base}/#/tools`);
    await page.waitForSelector('#tools tbody tr');
    assert.equal(await page.locator('#tools tr[data-tool="quote"] td.contract').innerText(), 'mismatch');
    await page.goto(`${base}/#/shape-drift`);
    const card = page.locator('article[data-kind="declared_output_mismatch"]');
    await card.waitFor();
    assert.equal(await card.locator('.kind-chip').innerText(), 'declared output mismatch');
    assert.match(await card.locator('.before .box-label').innerText(), new RegExp(`^DECLARED ${report.signal_groups[0].baseline_hash}$`));
    assert.match(await card.locator('.before').innerText(), /"price": \{\s+"type": "number"/);
    assert.match(await card.innerText(), /price: declared number, returned string/);
    await page.goto(`${base}/#/servers/stocks-mcp/timeline/quote`);
    await page.locator('#contract').waitFor();
    assert.match(await page.locator('h1 + .contract-banner').innerText(), /quote/);
    assert.equal(await page.locator('#contract .contract-state').innerText(), 'mismatch');
    assert.match(await page.locator('#contract .verdict-mismatch').innerText(), /price: declared number, returned string/);
    assert.deepEqual(await page.locator('#contract .observed-shape .changed-path').allInnerTexts(), ['price']);
    assert.ok(await page.locator('svg[data-chart="calls"] line.marker[data-kind="declared_output_mismatch"]').count() >= 1);
    console.log(`declared output mismatch: ${await shot(page, 'timeline-mismatch')}`);
    await page.close();
  } finally {
    own.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an event with more changes than it lists counts the rest, on its card and in the chips', async () => {
  // One enum rewritten whole: 1,100 values removed (breaking) and 1,100 added; an event lists 1,000 of each.
  const list = (prefix) => [{ name: 'pick', inputSchema: { type: 'object', properties: { mode: { type: 'string',
    enum: Array.from({ length: 1_100 }, (_, i) => `${prefix}${i}`) } } } }];
  for (const prefix of ['a', 'b']) {
    const response = await fetch(`${url}/api/servers/wide-mcp/tools`, { method: 'PUT',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(list(prefix)) });
    assert.ok(response.ok, `PUT wide-mcp: ${response.status}`);
  }
  const deadline = Date.now() + 30_000;
  let health;
  for (;;) {
    health = await fetch(`${url}/api/health/servers/wide-mcp`).then((r) => (r.ok ? r.json() : null), () => null);
    if (health?.status === 'DEGRADED') break;
    assert.ok(Date.now() < deadline, `drift on wide-mcp within 30 s: ${JSON.stringify(health)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const page = await newPage();
  await page.goto(`${url}/#/servers/wide-mcp/drift`);
  const note = page.locator('article.event .unlisted');
  await note.waitFor();
  assert.equal(await note.innerText(),
    '… and 200 more changes not listed (100 breaking, 100 compatible). Compare the full schemas below.');
  assert.equal(await page.locator('article.event .change').count(), 2_000);
  assert.deepEqual(await page.locator('#summary-chips .chip').allInnerTexts(), ['1100 breaking', '1100 compatible']);
  await page.close();
});

test('an event the history answered without its lists fetches them when its schemas are opened', async () => {
  const page = await newPage();
  // As a long history answers for its older events: lists left out.
  await page.route('**/drift-history?*', async (route) => {
    const events = await (await route.fetch()).json();
    await route.fulfill({ json: events.map((e) => ({ ...e, previous_tools: [], current_tools: [], lists_omitted: true })) });
  });
  const fetched = page.waitForResponse((r) => r.url().includes('/api/health/servers/wide-mcp/drift-events/'));
  await page.goto(`${url}/#/servers/wide-mcp/drift`);
  await page.locator('article.event button.toggle-schemas').click();
  assert.equal((await fetched).status(), 200);
  const schemas = page.locator('article.event .schemas');
  await schemas.locator('.box-label').first().waitFor();
  assert.deepEqual(await schemas.locator('.box-label').allInnerTexts(), ['BEFORE', 'AFTER']);
  assert.match(await schemas.innerText(), /a1099/);
  assert.match(await schemas.innerText(), /b1099/);
  await page.close();
});

test('records the detector refused are shown on the server list, hostile names as text', async () => {
  // Its own driftline, holding one tool per project: the second tool's call is refused.
  const dir = mkdtempSync(path.join(tmpdir(), 'driftline-ui-dead-'));
  const { proc: own, address } = spawnServe(dir, [], { DRIFTLINE__LIMITS__MAX_TOOLS_PER_PROJECT: '1' });
  try {
    const base = await address;
    const hostile = '<img src=x onerror="window.pwned=1">';
    const spans = ['lookup', hostile].map((tool, i) => ({ span_id: `d-${i}`, server: 'srv', tool,
      started_at: new Date().toISOString(), duration_ms: 5, status: 'success', return_value: { ok: true } }));
    const sent = await fetch(`${base}/v1/spans`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(spans) });
    assert.equal(sent.status, 202);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const counts = await fetch(`${base}/api/health/dead-letters`).then((r) => r.json(), () => []);
      if (counts.length > 0) break;
      assert.ok(Date.now() < deadline, 'the refused call counted within 30 s');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(base);
    const notice = page.locator('#dead-letters [data-kind="tool_limit"]');
    await notice.waitFor();
    const text = await notice.innerText();
    assert.match(text, /^1 record \(tool limit\), the last /);
    assert.ok(text.includes('limits.max_tools_per_project = 1') && text.includes(hostile), text);
    assert.equal(await page.locator('#dead-letters img').count(), 0);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    console.log(`dead letters: ${await shot(page, 'dead-letters')}`);
    await page.close();
  } finally {
    own.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('upcoming: the watcher captures a new npm release in the sandbox; the tab shows version in use, verdict, pin, impact, and accepts ahead', async () => {
  // Real registry software (verdaccio) with the test server's 1.0.0, then its 1.1.0 (scripts/upstream-registries.sh).
  const registries = (...args) => execFileSync(path.resolve('../../scripts/upstream-registries.sh'), args, { stdio: ['ignore', 'ignore', 'inherit'] });
  registries('up');
  registries('publish-npm', path.resolve('../upstream/npm/weather-1.0.0'));
  const env = Object.fromEntries(readFileSync(path.resolve('../../target/upstream/env'), 'utf8').trim().split('\n').map((l) => l.split(/=(.*)/s).slice(0, 2)));
  const dir = mkdtempSync(path.join(tmpdir(), 'driftline-ui-upstream-'));
  const config = path.join(dir, 'driftline.toml');
  writeFileSync(config, [
    '[[upstream]]', 'package = "npm:@driftline-test/weather-server"', 'server = "weather"', '',
    '[upstream_watcher]', `npm_registry = ${JSON.stringify(env.NPM_REGISTRY)}`, 'npm_interval_seconds = 1', '',
  ].join('\n'));
  const { proc: own, address } = spawnServe(dir, ['--config', config]);
  try {
    const base = await address;
    const tools = JSON.parse(readFileSync(path.resolve('../upstream/lists/weather-npm-1.0.0.json'), 'utf8'));
    const put = await fetch(`${base}/api/servers/weather/tools`, { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ tools }) });
    assert.equal(put.status, 202, await put.text());
    const spans = ['planner', 'planner', 'researcher'].map((agent, i) => ({ span_id: `u-${i}`, server: 'weather', tool: 'get_alerts', agent_name: agent,
      started_at: new Date().toISOString(), duration_ms: 5, status: 'success', return_value: { alerts: [] } }));
    const sent = await fetch(`${base}/v1/spans`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(spans) });
    assert.equal(sent.status, 202);
    const releases = async (count, what) => {
      const deadline = Date.now() + 180_000;
      for (;;) {
        const seen = await fetch(`${base}/api/upstream`).then((r) => r.json(), () => []);
        if (seen.length >= count) return seen;
        assert.ok(Date.now() < deadline, `${what} within 180 s: ${JSON.stringify(seen)}`);
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    };
    await releases(1, 'the watcher captured 1.0.0');
    registries('publish-npm', path.resolve('../upstream/npm/weather-1.1.0'));
    const seen = await releases(2, 'the watcher captured 1.1.0');
    assert.equal(seen[0].version, '1.1.0', JSON.stringify(seen[0]));
    assert.equal(seen[0].max_classification, 'BREAKING', JSON.stringify(seen[0]));

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('dialog', (dialog) => dialog.accept());
    await page.goto(base);
    const line = page.locator('#servers tr[data-server="weather"] .release-line');
    assert.equal(await line.innerText(), 'release 1.0.0 → 1.1.0 (BREAKING)');
    // The server itself stays UP: the release is upcoming, not drift.
    await page.locator('#servers tr[data-server="weather"] .status-UP').waitFor();
    await page.locator('nav[aria-label="Main"] a[data-nav="upcoming"]').click();
    const row = page.locator('#upcoming tr[data-server="weather"]');
    await row.waitFor();
    assert.equal(await row.locator('.in-use').innerText(), '1.0.0');
    assert.equal(await row.locator('.newest').innerText(), '1.1.0');
    assert.match(await row.innerText(), /BREAKING[\s\S]*@driftline-test\/weather-server@1\.0\.0/);
    console.log(`upcoming: ${await shot(page, 'upcoming')}`);
    await row.locator('a').click();
    const card = page.locator('article.release[data-version="1.1.0"]');
    await card.waitFor();
    assert.equal(await card.locator('.change[data-change="tool_removed"]').count(), 1);
    assert.match(await card.locator('.pin').innerText(), /pin it: @driftline-test\/weather-server@1\.0\.0/);
    const removed = card.locator('.impact-tool[data-tool="get_alerts"]');
    assert.match(await removed.innerText(), /removed: all 3 calls would fail[\s\S]*planner[\s\S]*researcher/);
    console.log(`upcoming release: ${await shot(page, 'upcoming-release')}`);
    await card.locator('button.accept-ahead').click();
    assert.match(await card.locator('.form-ok').innerText(), /Accepted ahead: 1\.1\.0/);
    await page.close();
  } finally {
    own.kill();
    registries('down');
    rmSync(dir, { recursive: true, force: true });
  }
});
