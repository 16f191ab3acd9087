// A small chat page on the AI SDK's own client, without React: the `ai` package's AbstractChat
// (what useChat wraps) with its DefaultChatTransport, against a relay's UI message stream route.
// tests/e2e/test_ui_stream_browser.py bundles it with esbuild (chat.js: the browser cannot
// resolve the bare import `ai`) and serves it next to index.html and a config.json:
//
//   {"api": "http://127.0.0.1:PORT/v1/chat", "token": "..."}
//
// `api` is the transport's: the chat route (`/v1/chat` or `/v1/chat/{agent}`); the resume GET
// goes to `${api}/${chatId}/stream`. The token is sent as `Authorization: Bearer`.
//
// What the page does, as an app on the AI SDK does it:
// * keeps the chat (its id and messages) in sessionStorage on every change, and on load shows
//   what it kept and resumes the chat (useChat's `resume: true`: resumeStream(), which asks the
//   relay for the chat's answer still under way -- 204 when there is none);
// * runs the model's calls of its one tool, `lookup`, in onToolCall (addToolResult), and sends
//   the conversation again when every call of the last message has its result
//   (sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls).
//
// What it shows: #status (data-status: the chat's status), #messages (an li per message, class
// its role, data-id its id; a p.text per text part, a div.tool per tool part with data-name and
// data-state), #error (the chat's error), and body[data-resume] ("pending", then "done" once a
// resume settled).

import {
  AbstractChat,
  DefaultChatTransport,
  getToolOrDynamicToolName,
  isToolOrDynamicToolUIPart,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';

const KEPT = 'trio-agents.ai-sdk-chat';

// The page's tool: the model is told about it (the relay forwards `tools` of the request body
// to the model) and the page answers its calls.
const TOOLS = [
  {
    name: 'lookup',
    description: 'Look a word up in the page.',
    parameters: {
      type: 'object',
      properties: { q: { type: 'string' } },
      required: ['q'],
    },
  },
];

function lookup(input) {
  return { found: `${input?.q ?? ''} is looked up by the page` };
}

// The ChatState AbstractChat keeps its status, error and messages in: every change redraws
// the page and keeps the chat. Messages are copied in (snapshot), as the SDK's own states do.
class PageState {
  #status = 'ready';
  #error = undefined;
  #messages;

  constructor(messages, changed) {
    this.#messages = messages;
    this.changed = changed;
  }

  get status() {
    return this.#status;
  }

  set status(status) {
    this.#status = status;
    this.changed();
  }

  get error() {
    return this.#error;
  }

  set error(error) {
    this.#error = error;
    this.changed();
  }

  get messages() {
    return this.#messages;
  }

  set messages(messages) {
    this.#messages = [...messages];
    this.changed();
  }

  pushMessage = message => {
    this.#messages = [...this.#messages, this.snapshot(message)];
    this.changed();
  };

  popMessage = () => {
    this.#messages = this.#messages.slice(0, -1);
    this.changed();
  };

  replaceMessage = (index, message) => {
    this.#messages = this.#messages.with(index, this.snapshot(message));
    this.changed();
  };

  snapshot = thing => structuredClone(thing);
}

// A Chat without a framework: AbstractChat given the state above.
class PageChat extends AbstractChat {
  constructor({ messages = [], changed, ...init }) {
    super({ ...init, state: new PageState(messages, changed) });
  }
}

const $ = id => document.getElementById(id);

function element(tag, attributes, text) {
  const made = document.createElement(tag);
  Object.assign(made, attributes);
  if (text !== undefined) made.textContent = text;
  return made;
}

function drawPart(part) {
  if (part.type === 'text') return element('p', { className: 'text' }, part.text);
  if (isToolOrDynamicToolUIPart(part)) {
    const name = getToolOrDynamicToolName(part);
    const said = part.state === 'output-available' ? ` -> ${JSON.stringify(part.output)}` : '';
    const tool = element('div', { className: 'tool' }, `${name}(${JSON.stringify(part.input)})${said}`);
    tool.dataset.name = name;
    tool.dataset.state = part.state;
    return tool;
  }
  return null; // step-start, reasoning, sources: not shown here
}

function drawMessage(message) {
  const item = element('li', { className: message.role });
  item.dataset.id = message.id;
  item.append(...message.parts.map(drawPart).filter(Boolean));
  return item;
}

let chat;

function changed() {
  if (chat === undefined) return; // the state is being made, with the chat
  const { status, error, messages } = chat;
  $('status').textContent = status;
  $('status').dataset.status = status;
  $('error').hidden = error === undefined;
  $('error').textContent = error?.message ?? '';
  $('messages').replaceChildren(...messages.map(drawMessage));
  $('send').disabled = status === 'submitted' || status === 'streaming';
  sessionStorage.setItem(KEPT, JSON.stringify({ id: chat.id, messages }));
}

async function start() {
  const config = await (await fetch('config.json', { cache: 'no-store' })).json();
  const kept = JSON.parse(sessionStorage.getItem(KEPT) ?? 'null');
  chat = new PageChat({
    id: kept?.id,
    messages: kept?.messages ?? [],
    changed,
    transport: new DefaultChatTransport({
      api: config.api,
      headers: { Authorization: `Bearer ${config.token}` },
      body: { tools: TOOLS },
    }),
    onToolCall: ({ toolCall }) => {
      if (toolCall.toolName !== 'lookup') return;
      // Not awaited: the chat takes the result once the answer it came in is processed.
      chat.addToolResult({
        tool: 'lookup',
        toolCallId: toolCall.toolCallId,
        output: lookup(toolCall.input),
      });
    },
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  });
  $('ask').addEventListener('submit', event => {
    event.preventDefault();
    const text = $('prompt').value.trim();
    if (!text) return;
    $('prompt').value = '';
    chat.sendMessage({ text });
  });
  changed();
  if (kept !== null) {
    // A reload: what was kept is shown; the relay replays the answer under way, if any.
    document.body.dataset.resume = 'pending';
    await chat.resumeStream();
    document.body.dataset.resume = 'done';
  }
}

start().catch(error => {
  $('error').hidden = false;
  $('error').textContent = `the page did not start: ${error?.message ?? error}`;
});
