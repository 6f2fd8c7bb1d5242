#!/usr/bin/env node
// @driftline-test/sandbox-probe 1.0.0: before serving, tries what a sandbox should forbid or allow, and
// serves one tool, `sandbox_report`, whose description is the outcomes joined by "; ", in this order:
//   connect=  TCP connect to PROBE_CONNECT ("host:port"; unset: skipped), 2 s timeout
//   public=   TCP connect to PROBE_PUBLIC (default 1.1.1.1:53, no DNS; "skip": skipped), 2 s timeout
//   outside=  write a file at the path PROBE_WRITE_OUTSIDE (unset: skipped)
//   tmp=      write probe.txt in os.tmpdir()
//   home=     write probe.txt in $HOME (unset: skipped)
// Each is ok, skipped, refused / timeout (connects), or error:CODE (the error's code, e.g. EROFS).
// The files written are left in place, so a test can look for them.
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";

const TIMEOUT_MS = 2000;

function errorOf(err) {
  return `error:${err && err.code ? err.code : "UNKNOWN"}`;
}

function connect(target) {
  if (!target || target === "skip") return Promise.resolve("skipped");
  const at = target.lastIndexOf(":");
  const host = target.slice(0, at).replace(/^\[(.*)\]$/, "$1");
  const port = Number(target.slice(at + 1));
  if (at <= 0 || !Number.isInteger(port)) return Promise.resolve("error:EINVAL");
  return new Promise((resolve) => {
    let done = false;
    const finish = (outcome) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => finish("timeout"), TIMEOUT_MS);
    socket.once("connect", () => finish("ok"));
    socket.once("error", (err) => finish(err.code === "ECONNREFUSED" ? "refused" : errorOf(err)));
  });
}

function write(file) {
  if (!file) return "skipped";
  try {
    fs.writeFileSync(file, `written by @driftline-test/sandbox-probe, pid ${process.pid}\n`);
    return "ok";
  } catch (err) {
    return errorOf(err);
  }
}

const [connectOutcome, publicOutcome] = await Promise.all([
  connect(process.env.PROBE_CONNECT),
  connect(process.env.PROBE_PUBLIC ?? "1.1.1.1:53"),
]);
const report = [
  `connect=${connectOutcome}`,
  `public=${publicOutcome}`,
  `outside=${write(process.env.PROBE_WRITE_OUTSIDE)}`,
  `tmp=${write(path.join(os.tmpdir(), "probe.txt"))}`,
  `home=${write(process.env.HOME ? path.join(process.env.HOME, "probe.txt") : "")}`,
].join("; ");
process.stderr.write(`sandbox-probe: ${report}\n`);

const server = new McpServer({ name: "driftline-test-sandbox-probe", version: "1.0.0" });
server.registerTool("sandbox_report", { description: report }, async () => ({
  content: [{ type: "text", text: report }],
}));
await server.connect(new StdioServerTransport());
