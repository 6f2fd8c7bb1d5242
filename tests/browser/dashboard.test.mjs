// Dashboard tests: `driftline serve` loaded with `driftline demo --keep-drift`, looked at in Debian's
// headless Chromium through playwright-core. Screenshots of every tab go to target/screenshots/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
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

async function startServer() {
  dataDir = mkdtempSync(path.join(tmpdir(), 'driftline-ui-'));
  server = spawn(BIN, ['serve', '--bind', '127.0.0.1:0', '--data-dir', dataDir], {
    stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, DRIFTLINE__LOG__LEVEL: 'warn' },
  });
  const lines = createInterface({ input: server.stdout });
  url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('driftline serve did not start within 30 s')), 30_000);
    lines.once('line', (line) => { clearTimeout(timer); resolve(line.replace('driftline listening on ', '').trim()); });
    server.once('exit', (code) => reject(new Error(`driftline serve exited with ${code}`)));
  });
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
  assert.match(planner[0], /planner\s+24\s+0\s+\d+ ms\s+HIGH/);
  assert.match(planner[1], /researcher\s+3\s+1\s+\d+ ms\s+MEDIUM/);
  assert.match(await card.locator('[data-tool="fetch_page"]').innerText(), /No recent callers — tool may be unused\./);
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
  await page.selectOption('#baseline', 'manual');
  await page.click('#thresholds button[type=submit]');
  await page.waitForSelector('.form-ok');
  const saved = await (await fetch(`${url}/api/settings/detector-thresholds`)).json();
  assert.equal(saved.thresholds.baseline, 'manual');
  await page.reload();
  await page.waitForSelector('#baseline');
  assert.equal(await page.locator('#baseline').inputValue(), 'manual');
  await page.selectOption('#baseline', 'compatible');
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
          tool: 'forged_tool', started_at: '2026-03-26T08:15:42.000Z', duration_ms: 1, status: 'success' }]) })
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
  const probed = spawn(BIN, ['serve', '--bind', '127.0.0.1:0', '--data-dir', probeDir, '--config', config], {
    stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, DRIFTLINE__LOG__LEVEL: 'warn' },
  });
  try {
    const probedUrl = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('driftline serve did not start within 30 s')), 30_000);
      createInterface({ input: probed.stdout }).once('line', (line) => {
        clearTimeout(timer);
        resolve(line.replace('driftline listening on ', '').trim());
      });
    });
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
