#!/usr/bin/env node
// @driftline-test/weather-server 1.1.0: get_forecast now requires `units` (breaking), get_alerts is gone
// (breaking), get_air_quality(city) is new. Over stdio.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "driftline-test-weather", version: "1.1.0" });

server.registerTool(
  "get_forecast",
  {
    description: "Weather forecast for a city.",
    inputSchema: {
      city: z.string().describe("City name"),
      units: z.enum(["metric", "imperial"]).describe("Unit system"),
      days: z.number().optional().describe("Number of days"),
    },
  },
  async ({ city, units, days }) => ({
    content: [{ type: "text", text: `${city}: sunny for ${days ?? 1} day(s), ${units}` }],
  }),
);

server.registerTool(
  "get_air_quality",
  {
    description: "Air quality index for a city.",
    inputSchema: {
      city: z.string().describe("City name"),
    },
  },
  async ({ city }) => ({
    content: [{ type: "text", text: `${city}: AQI 42` }],
  }),
);

await server.connect(new StdioServerTransport());
