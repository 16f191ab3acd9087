// Drives the relay's AG-UI route with the protocol's own reference client (@ag-ui/client 1.0.0)
// and checks what it receives against @ag-ui/core's own zod schemas.
//
// How the Python tests call it (cwd tests/e2e/node, after `npm ci` there):
//
//   node agui_client.mjs URL TOKEN SCENARIO
//     URL       the route: http://127.0.0.1:PORT/v1/agui or http://127.0.0.1:PORT/v1/agui/AGENT
//     TOKEN     the relay token, sent as "Authorization: Bearer TOKEN"
//     SCENARIO  plain          one run with one user message
//               frontend_tool  declares get_weather; when the run ends asking for it, runs it
//                              here, appends the tool message and runs again
//               abort          aborts the run after its first TEXT_MESSAGE_CONTENT
//
//   node agui_client.mjs verify < events.jsonl
//     checks AG-UI events given one JSON object a line, as the client would: each against
//     @ag-ui/core's EventSchema, then all through the client's own enforcement (a field it
//     does not know is reported as a warning) and sequence verifier (verifyEvents).
//
// stdout gets one JSON object a line:
//   {"run": N, "event": {...}}             each event as it came off the wire (run 1, 2, ...)
//   {"run": N, "invalid": {...}, "error": "..."}  an event @ag-ui/core's EventSchema refuses
//   {"run": N, "finished": {...}}          the RUN_FINISHED outcome as the client read it
//   {"run": N, "run_error": {...}}         a RUN_ERROR as the client read it
//   {"run": N, "result": ..., "messages": [...]}   what runAgent resolved with
//   {"tool": {...}} / {"aborted": {...}}   what frontend_tool / abort did
//   {"warning": "..."}                     the client's own warnings (stripped fields, ...)
//   {"verified": N}                        verify: all N events passed
// Exit status 0 when the scenario went as it should, every event was valid and the client
// warned of nothing; otherwise 1, with a line "agui_client: WHAT WENT WRONG" on stderr (2 for
// a usage error).
//
// Imports rxjs directly: @ag-ui/client depends on it (7.8.1, pinned by package-lock.json).

import { HttpAgent, enforceEvents, verifyEvents } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { from, lastValueFrom, tap, toArray } from "rxjs";

const out = (line) => process.stdout.write(JSON.stringify(line) + "\n");
let problems = 0;

// The client's warnings (e.g. "[ag-ui][enforce] Removed unrecognised material ...") say the
// server sent something a conforming one would not: each is reported, and is a failure.
const warn = console.warn;
console.warn = (...args) => {
  const text = args.map(String).join(" ");
  if (!text.startsWith("[ag-ui]")) return warn(...args);
  problems += 1;
  out({ warning: text });
};

function check(event, run) {
  const parsed = EventSchema.safeParse(event);
  if (!parsed.success) {
    problems += 1;
    out({ run, invalid: event, error: parsed.error.message });
  }
}

// An HttpAgent that shows every event as it came off the wire, before the client's own
// pipeline (compatibility, enforcement, verification) sees it.
class CheckedAgent extends HttpAgent {
  run(input) {
    return super.run(input).pipe(
      tap((event) => {
        out({ run: this.runNumber, event });
        check(event, this.runNumber);
      }),
    );
  }
}

async function runOnce(agent, parameters, subscriber = {}) {
  agent.runNumber = (agent.runNumber ?? 0) + 1;
  const run = agent.runNumber;
  const { result, newMessages } = await agent.runAgent(parameters, {
    onRunFinishedEvent: ({ outcome, result, pendingToolCallIds, interrupts }) => {
      out({ run, finished: { outcome, result, pendingToolCallIds, interrupts } });
    },
    onRunErrorEvent: ({ event }) => {
      out({ run, run_error: { message: event.message, code: event.code } });
    },
    ...subscriber,
  });
  out({ run, result: result ?? null, messages: newMessages });
}

const WEATHER = {
  name: "get_weather",
  description: "The current weather in a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  },
};

function getWeather({ city }) {
  return { city, temperature: 21, unit: "C", sky: "clear" };
}

const scenarios = {
  async plain(agent) {
    agent.addMessage({ id: randomUUID(), role: "user", content: "Say hello." });
    await runOnce(agent);
  },

  async frontend_tool(agent) {
    agent.addMessage({ id: randomUUID(), role: "user", content: "What is the weather in Paris?" });
    await runOnce(agent, { tools: [WEATHER] });
    const answered = new Set(agent.messages.filter((m) => m.role === "tool").map((m) => m.toolCallId));
    const calls = agent.messages
      .filter((m) => m.role === "assistant")
      .flatMap((m) => m.toolCalls ?? [])
      .filter((call) => call.function.name === WEATHER.name && !answered.has(call.id));
    if (calls.length === 0) throw new Error("the first run asked for no get_weather call");
    for (const call of calls) {
      const value = getWeather(JSON.parse(call.function.arguments || "{}"));
      out({ tool: { id: call.id, arguments: call.function.arguments, value } });
      agent.addMessage({
        id: randomUUID(),
        role: "tool",
        toolCallId: call.id,
        content: JSON.stringify(value),
      });
    }
    await runOnce(agent, { tools: [WEATHER] });
  },

  async abort(agent) {
    agent.addMessage({ id: randomUUID(), role: "user", content: "Count slowly to one hundred." });
    let contents = 0;
    await runOnce(agent, {}, {
      onTextMessageContentEvent: () => {
        contents += 1;
        if (contents === 1) agent.abortRun();
      },
    });
    if (contents === 0) throw new Error("no TEXT_MESSAGE_CONTENT arrived to abort after");
    out({ aborted: { contents } });
  },
};

async function verify() {
  const lines = readFileSync(0, "utf8").split("\n").filter((line) => line.trim());
  const events = lines.map((line) => JSON.parse(line));
  events.forEach((event) => check(event, 0));
  // The client's own stages: enforcement (warns of fields it strips), then verification.
  await lastValueFrom(from(events).pipe(enforceEvents(), verifyEvents(), toArray()));
  if (problems === 0) out({ verified: events.length });
}

async function main(argv) {
  if (argv[0] === "verify") return verify();
  const [url, token, scenario] = argv;
  if (!url || !token || !(scenario in scenarios)) {
    process.stderr.write(
      `usage: node agui_client.mjs URL TOKEN (${Object.keys(scenarios).join("|")})\n` +
        "       node agui_client.mjs verify < events.jsonl\n",
    );
    process.exit(2);
  }
  const agent = new CheckedAgent({ url, headers: { Authorization: `Bearer ${token}` } });
  await scenarios[scenario](agent);
}

try {
  await main(process.argv.slice(2));
  if (problems > 0) {
    throw new Error(`${problems} event(s) failed @ag-ui/core's EventSchema or drew a warning`);
  }
} catch (error) {
  const cause = error?.cause ? ` (${error.cause.message ?? error.cause})` : "";
  process.stderr.write(`agui_client: ${error?.message ?? error}${cause}\n`);
  process.exit(1);
}
