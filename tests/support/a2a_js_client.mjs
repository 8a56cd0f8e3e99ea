// An A2A caller built on the official JavaScript SDK (@a2a-js/sdk), so the tests drive Pallas's
// A2A surface with a client nobody here wrote. One operation per run; every result is one JSON
// line on stdout, in the SDK's own JSON form of the A2A 1.0 types (enums as "TASK_STATE_…").
//
//   node a2a_js_client.mjs --sdk DIR [--timeout SECONDS] OPERATION BASE_URL [ARGS]
//     card    BASE                          {"card": AgentCard}
//     send    BASE TEXT [--context-id ID]   {"task": Task} or {"message": Message}   (blocking)
//     stream  BASE TEXT [--context-id ID]   one {"task"|"statusUpdate"|"artifactUpdate"|"message": …}
//                                           line per event, flushed as it arrives
//     get     BASE TASK_ID                  {"task": Task}
//     cancel  BASE TASK_ID                  {"task": Task}
//
// DIR is the install of hack/build/mcp-peers/a2a-js (it holds node_modules/@a2a-js/sdk). The client
// is made the SDK's way, ClientFactory.createFromUrl: it reads the card at
// BASE/.well-known/agent-card.json and picks the transport the card names.
// A bearer token, if any, comes from the environment (A2A_BEARER_TOKEN), not the command line,
// where every process on the machine could read it; it is sent as `Authorization: Bearer …`.
// A failure prints {"error": {"name", "message", "cause"?}} and exits 2; bad usage exits 64.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const USAGE =
  "usage: a2a_js_client.mjs --sdk DIR [--timeout S] (card BASE | send BASE TEXT | stream BASE TEXT " +
  "| get BASE TASK_ID | cancel BASE TASK_ID) [--context-id ID]";

function usage(problem) {
  process.stderr.write(`a2a_js_client: ${problem}\n${USAGE}\n`);
  process.exit(64);
}

/** Imports an entry point of the installed SDK by its package.json `exports` (the ESM build). */
async function importSdk(dir, subpath) {
  const root = join(dir, "node_modules", "@a2a-js", "sdk");
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  } catch (err) {
    usage(`no @a2a-js/sdk under ${dir} (hack/build/mcp-peers.sh installs it): ${err.message}`);
  }
  const entry = manifest.exports?.[subpath]?.import;
  if (!entry) throw new Error(`@a2a-js/sdk in ${dir} exports no ${subpath}`);
  return import(pathToFileURL(join(root, entry)).href);
}

function print(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

let parsed;
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: {
      sdk: { type: "string" },
      timeout: { type: "string", default: "30" },
      "context-id": { type: "string" },
    },
  });
} catch (err) {
  usage(err.message);
}
const { values: opts, positionals } = parsed;
const [operation, base, arg] = positionals;
if (!opts.sdk) usage("--sdk DIR is required");
const timeoutMs = Number(opts.timeout) * 1000;
if (!(timeoutMs > 0)) usage(`--timeout ${opts.timeout} is not a positive number of seconds`);
const argumentOf = { card: null, send: "TEXT", stream: "TEXT", get: "TASK_ID", cancel: "TASK_ID" };
if (!(operation in argumentOf)) usage(`unknown operation ${JSON.stringify(operation)}`);
if (!base) usage(`${operation} needs the agent's base URL`);
if (argumentOf[operation] && !arg) usage(`${operation} needs a ${argumentOf[operation]}`);

// Every request of the run shares one deadline, so a server that never answers fails the run; the
// watchdog also bounds what the signal does not reach (the card's fetch inside createFromUrl).
const signal = AbortSignal.timeout(timeoutMs);
setTimeout(() => {
  print({ error: { name: "TimeoutError", message: `no end after ${opts.timeout} s` } });
  process.exit(2);
}, timeoutMs + 1000).unref();
const token = process.env.A2A_BEARER_TOKEN;
const requestOptions = { signal, serviceParameters: token ? { Authorization: `Bearer ${token}` } : {} };

const core = await importSdk(opts.sdk, ".");
const { ClientFactory } = await importSdk(opts.sdk, "./client");
const { Task, Message, AgentCard, StreamResponse, Role } = core;

function userMessage(text) {
  return {
    messageId: crypto.randomUUID(),
    contextId: opts["context-id"] ?? "",
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "text/plain" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

function sendRequest(text) {
  return { tenant: "", message: userMessage(text), configuration: undefined, metadata: undefined };
}

/** A blocking send's result is a Task or a Message; only a Task has a status. */
function result(value) {
  return "status" in value ? { task: Task.toJSON(value) } : { message: Message.toJSON(value) };
}

try {
  const client = await new ClientFactory().createFromUrl(base);
  switch (operation) {
    case "card":
      print({ card: AgentCard.toJSON(await client.getAgentCard(requestOptions)) });
      break;
    case "send":
      print(result(await client.sendMessage(sendRequest(arg), requestOptions)));
      break;
    case "stream":
      for await (const event of client.sendMessageStream(sendRequest(arg), requestOptions)) {
        print(StreamResponse.toJSON(event));
      }
      break;
    case "get":
      print({ task: Task.toJSON(await client.getTask({ tenant: "", id: arg }, requestOptions)) });
      break;
    case "cancel":
      print({ task: Task.toJSON(await client.cancelTask({ tenant: "", id: arg, metadata: undefined }, requestOptions)) });
      break;
  }
} catch (err) {
  // fetch's own errors say only "fetch failed"; the reason (ECONNREFUSED, a timeout) is the cause.
  const cause = err?.cause ? String(err.cause.message ?? err.cause) : undefined;
  print({ error: { name: err?.name ?? "Error", message: String(err?.message ?? err), cause } });
  process.exitCode = 2;
}
