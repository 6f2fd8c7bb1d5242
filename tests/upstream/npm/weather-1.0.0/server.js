#!/usr/bin/env node
// @driftline-test/weather-server 1.0.0: get_forecast(city, days?) and get_alerts(state), over stdio.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "driftline-test-weather", version: "1.0.0" });

server.registerTool(
  "get_forecast",
  {
    description: "Weather forecast for a city.",
    inputSchema: {
      city: z.string().describe("City name"),
      days: z.number().optional().describe("Number of days"),
    },
  },
  async ({ city, days }) => ({
    content: [{ type: "text", text: `${city}: sunny for ${days ?? 1} day(s)` }],
  }),
);

server.registerTool(
  "get_alerts",
  {
    description: "Weather alerts for a US state.",
    inputSchema: {
      state: z.string().describe("Two-letter state code"),
    },
  },
  async ({ state }) => ({
    content: [{ type: "text", text: `${state}: no alerts` }],
  }),
);

await server.connect(new StdioServerTransport());
