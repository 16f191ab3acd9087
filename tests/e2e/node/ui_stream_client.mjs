// The AI SDK's own chat client (the `ai` package's DefaultChatTransport and readUIMessageStream,
// no React) driven against a relay's UI message stream route.
//
//   node ui_stream_client.mjs API TOKEN SCENARIO [PROMPT]
//
// API is the transport's `api`: the chat route's full URL, e.g. http://127.0.0.1:8000/v1/chat
// (the relay's model) or http://127.0.0.1:8000/v1/chat/assistant (an agent); the resume GET
// goes to `${API}/${chatId}/stream`, as the transport builds it. TOKEN is sent as
// `Authorization: Bearer TOKEN` on every request. PROMPT is the user's text (default per
// scenario). The Python test runs it from tests/e2e/node (where node_modules is):
//
//   subprocess.run(["node", "ui_stream_client.mjs", api, token, "plain"], cwd=NODE_DIR,
//                  capture_output=True, text=True, timeout=60)
//
// and reads stdout: one JSON object per line, each with a "kind":
//   {"kind": "chat", "chatId"}                      first, always
//   {"kind": "chunk", "chunk"}                      each chunk received (checked against the
//                                                   package's own uiMessageChunkSchema)
//   {"kind": "server_error", "errorText"}          an `error` chunk the client reported
//   {"kind": "message", "message"}                  the UIMessage assembled (plain, tool)
//   {"kind": "tool_parts", "parts"}                 tool: the message's tool parts
//   {"kind": "continued", "message"}                tool: after answering client-side calls
//                                                   (not providerExecuted) and resending
//   {"kind": "aborted", "types", "text"}            abort: what arrived before the abort
//   {"kind": "dropped", "types"}                    resume: what arrived before the drop
//   {"kind": "resumed", "status": 204}              resume: nothing active to resume, or
//   {"kind": "resumed", "message"}                  resume: the replayed message, its chunks
//                                                   printed before it
//   {"kind": "failure", "error"}                    last, on failure (exit code 1)
// Exit codes: 0 success, 1 failure (HTTP error status, refused chunk, protocol violation the
// client detected, connection refused, ...), 2 usage.
//
// Scenarios:
//   plain   one user message; every chunk and the final message.
//   tool    like plain, then the message's tool parts; calls the client must run (not
//           providerExecuted, state input-available) are answered with {"echo": input} and the
//           conversation is resent (as useChat does after addToolResult), the continuation
//           assembled onto the same message.
//   abort   abort the fetch after the first text-delta; what was received.
//   resume  start a chat, drop the connection after the first text-delta, then
//           reconnectToStream({chatId}) and read the replay to its end.

import {
  DefaultChatTransport,
  generateId,
  getToolName,
  isToolUIPart,
  readUIMessageStream,
  uiMessageChunkSchema,
} from 'ai';

const PROMPTS = {
  plain: 'Say hello.',
  tool: 'Use a tool.',
  abort: 'Write a long answer.',
  resume: 'Write a long answer.',
};

function emit(kind, fields = {}) {
  process.stdout.write(JSON.stringify({ kind, ...fields }) + '\n');
}

class Failure extends Error {}

const schema = uiMessageChunkSchema();

async function checked(chunk) {
  const result = await schema.validate(chunk);
  if (!result.success) {
    throw new Failure(`chunk refused by uiMessageChunkSchema: ${JSON.stringify(chunk)}`);
  }
  return chunk;
}

// Reads `stream` to its end (or until `stopWhen(chunk)` says stop): prints each chunk, and
// assembles the message with readUIMessageStream (onto `message` when given). Returns the chunks
// and the last message. An `error` chunk is reported, not a failure; anything else the client
// rejects is.
async function consume(stream, { message, stopWhen } = {}) {
  const [forChunks, forMessage] = stream.tee();
  const errorTexts = new Set();
  const problems = [];
  let last = message;
  const assembling = (async () => {
    for await (const snapshot of readUIMessageStream({
      message,
      stream: forMessage,
      onError: error => problems.push(error),
    })) {
      last = snapshot;
    }
  })();
  const chunks = [];
  const reader = forChunks.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(await checked(value));
      emit('chunk', { chunk: value });
      if (value.type === 'error') errorTexts.add(value.errorText);
      if (stopWhen?.(value)) return { chunks, message: last, stopped: true };
    }
  } finally {
    reader.releaseLock();
  }
  await assembling;
  for (const error of problems) {
    if (error?.constructor === Error && errorTexts.has(error.message)) {
      emit('server_error', { errorText: error.message });
    } else {
      throw new Failure(`the client rejected the stream: ${error?.name}: ${error?.message}`);
    }
  }
  return { chunks, message: last, stopped: false };
}

function userMessage(text) {
  return { id: generateId(), role: 'user', parts: [{ type: 'text', text }] };
}

function send(transport, chatId, messages, { abortSignal, messageId } = {}) {
  return transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId,
    abortSignal,
  });
}

function toolParts(message) {
  return (message?.parts ?? []).filter(isToolUIPart).map(part => ({
    type: part.type,
    toolName: getToolName(part),
    toolCallId: part.toolCallId,
    state: part.state,
    input: part.input,
    output: part.output,
    errorText: part.errorText,
    providerExecuted: part.providerExecuted ?? false,
  }));
}

const isDelta = chunk => chunk.type === 'text-delta';

async function readUntilAborted(stream, controller) {
  const types = [];
  let text = '';
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { types, text, aborted: false };
      types.push((await checked(value)).type);
      if (isDelta(value)) {
        text += value.delta;
        controller.abort();
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return { types, text, aborted: true };
    throw error;
  }
}

async function run(api, token, scenario, prompt) {
  const transport = new DefaultChatTransport({
    api,
    headers: { Authorization: `Bearer ${token}` },
  });
  const chatId = generateId();
  emit('chat', { chatId });
  const user = userMessage(prompt);

  if (scenario === 'plain' || scenario === 'tool') {
    const { message } = await consume(await send(transport, chatId, [user]));
    emit('message', { message });
    if (scenario === 'plain') return;
    const parts = toolParts(message);
    emit('tool_parts', { parts });
    const open = message.parts.filter(
      part => isToolUIPart(part) && !part.providerExecuted && part.state === 'input-available',
    );
    if (open.length === 0) return;
    for (const part of open) {
      part.state = 'output-available';
      part.output = { echo: part.input };
    }
    const stream = await send(transport, chatId, [user, message], { messageId: message.id });
    const continued = await consume(stream, { message: structuredClone(message) });
    emit('continued', { message: continued.message });
    return;
  }

  if (scenario === 'abort' || scenario === 'resume') {
    const controller = new AbortController();
    const stream = await send(transport, chatId, [user], { abortSignal: controller.signal });
    const { types, text, aborted } = await readUntilAborted(stream, controller);
    if (!aborted) throw new Failure('the stream ended before any text-delta to abort after');
    if (scenario === 'abort') {
      emit('aborted', { types, text });
      return;
    }
    emit('dropped', { types });
    const resumed = await transport.reconnectToStream({ chatId });
    if (resumed == null) {
      emit('resumed', { status: 204 });
      return;
    }
    const { message } = await consume(resumed);
    emit('resumed', { message });
    return;
  }
  throw new Error(`unreachable scenario ${scenario}`);
}

const [api, token, scenario, prompt] = process.argv.slice(2);
if (!api || token === undefined || !(scenario in PROMPTS)) {
  process.stderr.write(
    `usage: node ui_stream_client.mjs API TOKEN {${Object.keys(PROMPTS).join('|')}} [PROMPT]\n`,
  );
  process.exit(2);
}
try {
  await run(api, token, scenario, prompt ?? PROMPTS[scenario]);
} catch (error) {
  const cause = error?.cause ? ` (${error.cause.code ?? error.cause.message ?? error.cause})` : '';
  const text = `${error?.name ?? 'Error'}: ${error?.message ?? error}${cause}`;
  emit('failure', { error: text });
  process.stderr.write(`ui_stream_client: ${scenario}: ${text}\n`);
  process.exit(1);
}
