// The relay's chat page: one websocket to /v1/relay on this origin, the frames of
// protocols.relay (version 3: every answer is a run, which outlives the page). Model text only
// ever reaches the page as text nodes (never as HTML).
//
// The conversation is kept in sessionStorage (this tab only) as it changes, frame by frame: the
// answer in progress with its run id and the seq of the last event shown. Reloading the page
// shows it again and, once connected, follows the run on from that seq (a "watch"): no text
// twice, none missing.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $("status"), login: $("login"), token: $("token"), remember: $("remember"),
    connect: $("connect"), disconnect: $("disconnect"), error: $("error"), messages: $("messages"),
    composer: $("composer"), prompt: $("prompt"), think: $("think"), clear: $("clear"),
    stop: $("stop"), send: $("send"),
  };
  const scroller = document.querySelector("main");
  const STORE = "trio-agents.relay.token";
  const CHAT = "trio-agents.relay.chat";
  const VERSION = 3;

  let socket = null; // the websocket, while one is open or opening
  let ready = null; // the server's "ready" frame, once it accepted the token
  // What the tab keeps: the history sent to the model, the messages shown, and the answer in
  // progress ({index, turn, question, run_id, seq}: its entry in shown, its run, its last seq).
  let chat = { history: [], shown: [], pending: null };
  let live = null; // the request (or watch) of the pending answer open on this socket
  const views = []; // per shown entry: {li, answer, thoughts, note}
  let counter = 0;

  const storage = {
    get(key) { try { return sessionStorage.getItem(key); } catch { return null; } },
    set(key, value) { try { sessionStorage.setItem(key, value); } catch { /* storage off */ } },
    clear(key) { try { sessionStorage.removeItem(key); } catch { /* storage off */ } },
  };

  function save() {
    if (chat.shown.length) storage.set(CHAT, JSON.stringify(chat));
    else storage.clear(CHAT);
  }

  function load() {
    try {
      const saved = JSON.parse(storage.get(CHAT) || "null");
      if (saved && Array.isArray(saved.history) && Array.isArray(saved.shown)) return saved;
    } catch { /* not ours, or damaged: start afresh */ }
    return null;
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function setStatus(state, text) {
    ui.status.dataset.state = state;
    ui.status.textContent = text;
  }

  function showError(text) {
    follow(() => { // the banner takes room from the conversation: keep its end in view
      ui.error.textContent = text || "";
      ui.error.hidden = !text;
    });
  }

  const describe = (frame) => `${frame.message} (${frame.code})`;

  function refresh() {
    const open = socket !== null;
    ui.send.disabled = ready === null || chat.pending !== null;
    ui.stop.disabled = live === null || live.stopping;
    ui.clear.disabled = live !== null;
    ui.token.disabled = open;
    ui.connect.hidden = open;
    ui.disconnect.hidden = !open;
  }

  // Keep the newest text in view, unless the reader scrolled up.
  function follow(change) {
    const atEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
    change();
    if (atEnd) scroller.scrollTop = scroller.scrollHeight;
  }

  // -- what is shown ------------------------------------------------------------------------------

  // An entry of chat.shown: {role, text, thinking?, state?, note?}, drawn as one list item.
  function draw(entry) {
    const li = element("li", `message ${entry.role}`);
    li.append(element("p", "who", entry.role === "user" ? "You" : "Assistant"));
    const view = { li, answer: null, thoughts: null, note: null };
    if (entry.role === "user") {
      li.append(element("div", "text", entry.text));
    } else {
      view.answer = element("div", "text answer", entry.text || "");
      li.append(view.answer);
      if (entry.thinking) thoughtsOf(view).textContent = entry.thinking;
    }
    paint(entry, view);
    follow(() => ui.messages.append(li));
    views.push(view);
    return view;
  }

  function paint(entry, view) {
    if (entry.state) view.li.dataset.state = entry.state;
    if (entry.state === "streaming") view.li.setAttribute("aria-busy", "true");
    else view.li.removeAttribute("aria-busy");
    if (entry.note && !view.note) {
      view.note = element("p", "note");
      follow(() => view.li.append(view.note));
    }
    if (view.note) {
      if (entry.note) view.note.textContent = entry.note;
      else { view.note.remove(); view.note = null; }
    }
  }

  function thoughtsOf(view) {
    if (!view.thoughts) {
      const details = element("details", "thinking");
      details.append(element("summary", "", "Reasoning"));
      view.thoughts = element("div", "text");
      details.append(view.thoughts);
      view.li.insertBefore(details, view.answer);
    }
    return view.thoughts;
  }

  function pendingEntry() {
    return chat.pending ? chat.shown[chat.pending.index] : null;
  }

  // The answer in progress ends: as `state` with `note`, its text the server's final word.
  function finish(state, note, partial) {
    const entry = pendingEntry();
    const view = views[chat.pending.index];
    chat.pending = null;
    live = null;
    entry.state = state;
    entry.note = note || "";
    if (partial) {
      entry.text = partial.content || "";
      view.answer.textContent = entry.text;
      if (partial.thinking) {
        entry.thinking = partial.thinking;
        thoughtsOf(view).textContent = partial.thinking;
      }
    }
    paint(entry, view);
    save();
    refresh();
    if (document.activeElement === ui.stop) ui.prompt.focus(); // Stop is disabled now
  }

  // -- the connection ---------------------------------------------------------------------------

  function connect(token) {
    if (socket || !token) return;
    showError("");
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const path = new URL("v1/relay", location.href).pathname;
    let ws;
    try {
      ws = new WebSocket(`${scheme}//${location.host}${path}`);
    } catch (error) {
      showError(`Cannot connect: ${error.message}`);
      return;
    }
    socket = ws;
    ready = null;
    let explained = false; // the page already said why this connection ends
    let leaving = false;
    ws.leave = () => { leaving = true; ws.close(1000); };
    setStatus("connecting", "Connecting…");
    refresh();

    ws.onopen = () => ws.send(JSON.stringify({ type: "hello", version: VERSION, token }));
    ws.onmessage = (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        console.error("relay: a frame that is not JSON:", String(event.data).slice(0, 200));
        showError("The relay sent something that is not JSON.");
        explained = true;
        ws.close(4000, "invalid frame"); // browsers may only send 1000 or 3000-4999
        ended(); // at once: the closing handshake may take a while
        return;
      }
      if (frame.type === "error" && !frame.id) {
        explained = true;
        showError(describe(frame));
        if (frame.code === "unauthorized") storage.clear(STORE);
        return;
      }
      if (frame.type === "ready") {
        ready = frame;
        if (ui.remember.checked) storage.set(STORE, token); else storage.clear(STORE);
        setStatus("connected", "Connected");
        refresh();
        resume();
        ui.prompt.focus();
        return;
      }
      receive(frame);
    };
    ws.onclose = (event) => ended(event.code);
    function ended(code) {
      if (socket !== ws) return;
      const wasReady = ready !== null;
      socket = null;
      ready = null;
      if (live) {
        live = null;
        const entry = pendingEntry();
        if (chat.pending.run_id) {
          // The run goes on at the relay: the next connection follows it on.
          entry.state = "interrupted";
          entry.note = "Connection lost: connect again to see the rest of this answer.";
          paint(entry, views[chat.pending.index]);
          save();
        } else {
          finish("interrupted", "Interrupted: the connection closed.");
        }
      }
      if (leaving || explained) {
        setStatus("disconnected", "Disconnected");
      } else {
        setStatus("lost", "Connection lost");
        showError(wasReady
          ? `Connection lost (close code ${code}). Connect again to continue.`
          : `Could not connect to the relay (close code ${code}).`);
      }
      refresh();
    }
  }

  // Follow the answer in progress on: the run, after the last event shown.
  function resume() {
    const pending = chat.pending;
    if (!pending || live || !socket || !ready) return;
    if (!pending.run_id) {
      // The page went away before the relay named the run: it cannot be found again.
      chat.history.splice(pending.turn);
      if (!ui.prompt.value) ui.prompt.value = pending.question;
      finish("interrupted", "Interrupted before the answer began: ask again.");
      return;
    }
    live = { id: `w${++counter}`, stopping: false };
    const entry = pendingEntry();
    entry.state = "streaming";
    entry.note = "";
    paint(entry, views[pending.index]);
    save();
    socket.send(JSON.stringify({
      type: "watch", id: live.id, run_id: pending.run_id, after: pending.seq,
    }));
    refresh();
  }

  // A frame about one request (or watch).
  function receive(frame) {
    if (!live || frame.id !== live.id) return; // e.g. a late answer to a finished cancel
    const pending = chat.pending;
    const entry = pendingEntry();
    const view = views[pending.index];
    if (typeof frame.seq === "number") {
      if (frame.seq <= pending.seq) return; // already shown
      pending.seq = frame.seq;
    }
    switch (frame.type) {
      case "run":
        pending.run_id = frame.run_id;
        save();
        break;
      case "delta":
        follow(() => {
          if (frame.channel === "thinking") {
            entry.thinking = (entry.thinking || "") + frame.text;
            thoughtsOf(view).append(frame.text);
          } else {
            entry.text += frame.text;
            view.answer.append(frame.text);
          }
        });
        save(); // the text shown and its seq, together
        break;
      case "gap":
        entry.note = "Part of this answer is missing: the relay no longer had it.";
        paint(entry, view);
        save();
        break;
      case "result": {
        const result = frame.result || {};
        if (result.content) chat.history.push({ role: "assistant", content: result.content });
        const end = result.finish && result.finish !== "stop" ? `Finished: ${result.finish}.` : "";
        finish("done", end, result);
        break;
      }
      case "abort": {
        const partial = frame.partial || {};
        if (partial.content) {
          chat.history.push({ role: "assistant", content: partial.content, interrupted: true });
        }
        finish("stopped", "Stopped.", partial);
        break;
      }
      case "error": {
        if (frame.code === "unknown_run") {
          // The relay no longer has the run: what was shown stays, marked.
          if (entry.text) {
            chat.history.push({ role: "assistant", content: entry.text, interrupted: true });
          }
          finish("interrupted", "The relay no longer has the rest of this answer.");
          break;
        }
        // Not answered: forget the question (it stays on screen) so it can be asked again.
        chat.history.splice(pending.turn);
        if (!ui.prompt.value) ui.prompt.value = pending.question;
        showError(describe(frame));
        finish("error", `Error: ${describe(frame)}`);
        break;
      }
      case "approval":
        save();
        approval(view, frame);
        break;
      default:
        break; // a frame type this page does not know: ignore it
    }
  }

  // The relay's policy asks a person to allow or deny a tool call.
  function approval(view, frame) {
    const call = frame.call || {};
    const box = element("div", "approval");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Tool call approval");
    const args = JSON.stringify(call.arguments || {});
    const why = frame.reason ? ` Reason: ${frame.reason}` : "";
    box.append(element("p", "", `Allow the tool call ${call.name}(${args})?${why}`));
    for (const decision of ["allow", "deny"]) {
      const button = element("button", "", decision === "allow" ? "Allow" : "Deny");
      button.type = "button";
      button.addEventListener("click", () => {
        if (socket && ready && live) {
          socket.send(JSON.stringify({ type: "approve", id: live.id, call: call.id, decision }));
        }
        box.replaceChildren(element("p", "", decision === "allow" ? "Allowed." : "Denied."));
      });
      box.append(button);
    }
    follow(() => view.li.append(box));
  }

  // -- sending ----------------------------------------------------------------------------------

  function send() {
    const text = ui.prompt.value;
    if (!socket || !ready || chat.pending || !text.trim()) return;
    const id = `r${++counter}`;
    const messages = [...chat.history, { role: "user", content: text }];
    const data = JSON.stringify({
      type: "stream",
      id,
      messages,
      options: ui.think.checked ? { think: true } : {},
      cancel_on_disconnect: false, // the answer goes on if the page is reloaded
    });
    if (new TextEncoder().encode(data).length > ready.max_frame) {
      showError(`This conversation is too long for the relay (over ${ready.max_frame} bytes). `
        + "Start a new chat.");
      return;
    }
    showError("");
    chat.history.push({ role: "user", content: text });
    chat.shown.push({ role: "user", text });
    draw(chat.shown[chat.shown.length - 1]);
    chat.shown.push({ role: "assistant", text: "", state: "streaming" });
    draw(chat.shown[chat.shown.length - 1]);
    chat.pending = {
      index: chat.shown.length - 1, turn: chat.history.length - 1, question: text,
      run_id: null, seq: 0,
    };
    live = { id, stopping: false };
    save();
    ui.prompt.value = "";
    socket.send(data);
    refresh();
  }

  function stop() {
    if (!live || live.stopping || !socket) return;
    live.stopping = true;
    socket.send(JSON.stringify({ type: "cancel", id: live.id }));
    refresh();
  }

  // -- wiring -----------------------------------------------------------------------------------

  ui.login.addEventListener("submit", (event) => {
    event.preventDefault();
    connect(ui.token.value);
  });
  ui.disconnect.addEventListener("click", () => socket && socket.leave());
  ui.remember.addEventListener("change", () => {
    if (!ui.remember.checked) storage.clear(STORE);
    else if (ready) storage.set(STORE, ui.token.value);
  });
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  ui.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    } else if (event.key === "Escape" && live) {
      event.preventDefault();
      stop();
    }
  });
  ui.stop.addEventListener("click", stop);
  ui.clear.addEventListener("click", () => {
    if (live) return;
    chat = { history: [], shown: [], pending: null };
    views.length = 0;
    ui.messages.replaceChildren();
    save();
    showError("");
    refresh();
    ui.prompt.focus();
  });

  // What this tab showed before a reload: drawn again, the answer in progress marked until
  // the connection follows it on.
  const saved = storage.get(STORE);
  const kept = load();
  if (kept) {
    chat = kept;
    for (const entry of chat.shown) draw(entry);
    const entry = pendingEntry();
    if (entry) {
      entry.state = "interrupted";
      entry.note = saved
        ? "Reconnecting to continue this answer…"
        : "Connect to see the rest of this answer.";
      paint(entry, views[chat.pending.index]);
    }
  }
  refresh();
  if (saved) {
    ui.token.value = saved;
    ui.remember.checked = true;
    connect(saved);
  }
})();
