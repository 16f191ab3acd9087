// The relay's chat page: one websocket to /v1/relay on this origin, the frames of
// protocols.relay. Model text only ever reaches the page as text nodes (never as HTML).
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
  const VERSION = 1;

  let socket = null; // the websocket, while one is open or opening
  let ready = null; // the server's "ready" frame, once it accepted the token
  const history = []; // {role, content[, interrupted]} in order: sent whole each time
  let current = null; // the request being answered: its id, bubble and history position
  let counter = 0;

  const storage = {
    get() { try { return sessionStorage.getItem(STORE); } catch { return null; } },
    set(value) { try { sessionStorage.setItem(STORE, value); } catch { /* storage off */ } },
    clear() { try { sessionStorage.removeItem(STORE); } catch { /* storage off */ } },
  };

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
    ui.send.disabled = ready === null || current !== null;
    ui.stop.disabled = current === null || current.stopping;
    ui.clear.disabled = current !== null;
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

  function bubble(role) {
    const li = element("li", `message ${role}`);
    li.append(element("p", "who", role === "user" ? "You" : "Assistant"));
    follow(() => ui.messages.append(li));
    return li;
  }

  function note(li, text) {
    follow(() => li.append(element("p", "note", text)));
  }

  function thoughtsOf(request) {
    if (!request.thoughts) {
      const details = element("details", "thinking");
      details.append(element("summary", "", "Reasoning"));
      request.thoughts = element("div", "text");
      details.append(request.thoughts);
      request.li.insertBefore(details, request.answer);
    }
    return request.thoughts;
  }

  function finish(state, text, partial) {
    const request = current;
    current = null;
    request.li.dataset.state = state;
    request.li.removeAttribute("aria-busy");
    if (partial) {
      request.answer.textContent = partial.content || "";
      if (partial.thinking) thoughtsOf(request).textContent = partial.thinking;
    }
    if (text) note(request.li, text);
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
        if (frame.code === "unauthorized") storage.clear();
        return;
      }
      if (frame.type === "ready") {
        ready = frame;
        if (ui.remember.checked) storage.set(token); else storage.clear();
        setStatus("connected", "Connected");
        refresh();
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
      if (current) finish("interrupted", "Interrupted: the connection closed.");
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

  // A frame about one request.
  function receive(frame) {
    if (!current || frame.id !== current.id) return; // e.g. a late answer to a finished cancel
    const request = current;
    switch (frame.type) {
      case "delta":
        follow(() => {
          if (frame.channel === "thinking") thoughtsOf(request).append(frame.text);
          else request.answer.append(frame.text);
        });
        break;
      case "result": {
        const result = frame.result || {};
        if (result.content) history.push({ role: "assistant", content: result.content });
        const end = result.finish && result.finish !== "stop" ? `Finished: ${result.finish}.` : "";
        finish("done", end, result);
        break;
      }
      case "abort": {
        const partial = frame.partial || {};
        if (partial.content) {
          history.push({ role: "assistant", content: partial.content, interrupted: true });
        }
        finish("stopped", "Stopped.", partial);
        break;
      }
      case "error": {
        // Not answered: forget the question (it stays on screen) so it can be asked again.
        history.splice(request.turn);
        if (!ui.prompt.value) ui.prompt.value = request.question;
        showError(describe(frame));
        finish("error", `Error: ${describe(frame)}`);
        break;
      }
      case "approval":
        approval(request, frame);
        break;
      default:
        break; // a frame type this page does not know: ignore it
    }
  }

  // The relay's policy asks a person to allow or deny a tool call.
  function approval(request, frame) {
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
        if (socket && ready) {
          socket.send(JSON.stringify({ type: "approve", id: frame.id, call: call.id, decision }));
        }
        box.replaceChildren(element("p", "", decision === "allow" ? "Allowed." : "Denied."));
      });
      box.append(button);
    }
    follow(() => request.li.append(box));
  }

  // -- sending ----------------------------------------------------------------------------------

  function send() {
    const text = ui.prompt.value;
    if (!socket || !ready || current || !text.trim()) return;
    const id = `r${++counter}`;
    const messages = [...history, { role: "user", content: text }];
    const data = JSON.stringify({
      type: "stream", id, messages, options: ui.think.checked ? { think: true } : {},
    });
    if (new TextEncoder().encode(data).length > ready.max_frame) {
      showError(`This conversation is too long for the relay (over ${ready.max_frame} bytes). `
        + "Start a new chat.");
      return;
    }
    showError("");
    history.push({ role: "user", content: text });
    const user = bubble("user");
    user.append(element("div", "text", text));
    const li = bubble("assistant");
    li.dataset.state = "streaming";
    li.setAttribute("aria-busy", "true");
    const answer = element("div", "text answer");
    li.append(answer);
    current = {
      id, li, answer, thoughts: null, stopping: false, turn: history.length - 1, question: text,
    };
    ui.prompt.value = "";
    socket.send(data);
    refresh();
  }

  function stop() {
    if (!current || current.stopping || !socket) return;
    current.stopping = true;
    socket.send(JSON.stringify({ type: "cancel", id: current.id }));
    refresh();
  }

  // -- wiring -----------------------------------------------------------------------------------

  ui.login.addEventListener("submit", (event) => {
    event.preventDefault();
    connect(ui.token.value);
  });
  ui.disconnect.addEventListener("click", () => socket && socket.leave());
  ui.remember.addEventListener("change", () => {
    if (!ui.remember.checked) storage.clear();
    else if (ready) storage.set(ui.token.value);
  });
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  ui.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    } else if (event.key === "Escape" && current) {
      event.preventDefault();
      stop();
    }
  });
  ui.stop.addEventListener("click", stop);
  ui.clear.addEventListener("click", () => {
    if (current) return;
    history.length = 0;
    ui.messages.replaceChildren();
    showError("");
    ui.prompt.focus();
  });

  refresh();
  const saved = storage.get();
  if (saved) {
    ui.token.value = saved;
    ui.remember.checked = true;
    connect(saved);
  }
})();
