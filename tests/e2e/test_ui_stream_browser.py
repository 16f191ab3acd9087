"""The AI SDK's chat in a real browser page against the relay (issue 26: "Tested ... in headless
Chromium with a small page using it"): ``tests/e2e/node/page`` -- ``chat.mjs``, the ``ai``
package's ``AbstractChat`` and ``DefaultChatTransport`` without React, bundled here with the
package's esbuild (``node_modules/.bin/esbuild``, into the test's tmp folder) -- loaded in
headless Chromium, driven by Selenium.

Two servers on loopback port 0, both on hypercorn in the test's trio loop: a tiny static site
(the page, its bundle, and a ``config.json`` naming the relay's route and token) and the
:class:`RelayServer`, which allows the site's origin (``origins=``): the page's requests are
cross-origin and carry the bearer header, so the browser asks the relay first (a CORS
preflight per URL, whose answer it then keeps). The relay's requests are recorded (method,
path, ``Origin``) to check that this is what happened.

Scenarios: a message and its streamed answer; a reload in the middle of an answer, which the
page resumes (its chat id and messages kept in ``sessionStorage``; ``resumeStream()`` on load)
and shows to its end without asking the model again; a tool call the page runs
(``onToolCall`` + ``addToolResult``, ``sendAutomaticallyWhen``); and an origin the relay does
not allow, where the browser stops at the preflight.

Real clock: the scripted provider paces its deltas in real seconds; Selenium blocks, so each
browser step runs in a worker thread and waits on conditions, bounded (``WAIT``). Without
``node``/``npm`` these tests skip (the page's packages cannot be installed); without Chromium
they fail, as the relay page's do (``test_relay_browser.py``; ``python scripts/test.py``
installs it).
"""

from __future__ import annotations

import functools
import json
import pathlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import pytest
import trio
from node_clients import node_clients
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_relay_browser import (
    WAIT,
    _console_errors,
    _require_chromium,
    _start_chromium,
    in_browser,
)

from actors.relay import RelayServer, serve
from actors.testing import Reply, ScriptedProvider
from protocols.messages import Role, ToolCall

TOKEN = "ui-stream-browser-token-0123456789"
PAGE = pathlib.Path(__file__).parent / "node" / "page"
KEPT = "trio-agents.ai-sdk-chat"  # the page's sessionStorage key (chat.mjs)
#: Seconds esbuild may take to bundle the page.
BUNDLE_TIMEOUT = 120

LONG = " ".join(f"word{n}" for n in range(1, 101)) + "."  # 100 words, about 600 characters
GREETING = "Hello from the relay, streamed in small pieces."

ASGI = Callable[..., Any]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The page's folder: ``index.html`` and ``chat.js``, ``chat.mjs`` bundled by esbuild
    (skips without node/npm; ``npm ci`` once if the packages are not installed)."""
    node = node_clients()
    folder = tmp_path_factory.mktemp("ui-stream-page")
    esbuild = node / "node_modules" / ".bin" / "esbuild"
    command = [
        str(esbuild),
        str(PAGE / "chat.mjs"),
        "--bundle",
        "--format=esm",
        "--platform=browser",
        "--target=chrome120",
        f"--outfile={folder / 'chat.js'}",
        "--log-level=warning",
    ]
    done = subprocess.run(
        command, cwd=node, capture_output=True, text=True, timeout=BUNDLE_TIMEOUT, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"esbuild could not bundle the page:\n{done.stdout}\n{done.stderr}")
    shutil.copy(PAGE / "index.html", folder / "index.html")
    return folder


# -- the two servers ----------------------------------------------------------------------------

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".json": "application/json"}


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def static_site(folder: pathlib.Path) -> ASGI:
    """An ASGI app serving ``folder``'s files by name (``/`` is ``index.html``), read when
    asked (``config.json`` is written once the relay's address is known)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        name = scope["path"].lstrip("/") or "index.html"
        path = folder / name
        found = "/" not in name and path.suffix in TYPES and path.is_file()
        body = await trio.Path(path).read_bytes() if found else b"not found"
        kind = TYPES[path.suffix] if found else "text/plain"
        headers = [(b"content-type", kind.encode()), (b"cache-control", b"no-store")]
        await send(
            {"type": "http.response.start", "status": 200 if found else 404, "headers": headers}
        )
        await send({"type": "http.response.body", "body": body})

    return app


@attrs.frozen
class Seen:
    """One HTTP request the relay was sent."""

    method: str
    path: str
    origin: str | None


def recorded(app: ASGI, seen: list[Seen]) -> ASGI:
    """``app``, each HTTP request it is sent recorded in ``seen``."""

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            origin = headers.get(b"origin")
            seen.append(Seen(scope["method"], scope["path"], origin and origin.decode()))
        await app(scope, receive, send)

    return recording


@attrs.frozen
class Setup:
    page: str  # the page's URL (its origin, with a slash)
    relay: RelayServer
    seen: list[Seen]  # the requests the relay was sent
    driver: WebDriver


@asynccontextmanager
async def running(
    site: pathlib.Path,
    tmp_path: pathlib.Path,
    provider: ScriptedProvider,
    *,
    origins: Callable[[str], Sequence[str]] = lambda page: [page],
) -> AsyncIterator[Setup]:
    """The page's site and a relay in front of ``provider`` (allowing the origins
    ``origins(page origin)``), each on a free port, and a fresh Chromium."""
    _require_chromium()
    folder = tmp_path / "site"
    shutil.copytree(site, folder)
    seen: list[Seen] = []
    async with trio.open_nursery() as nursery:

        async def start(app: ASGI) -> str:
            (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
            return str(url)

        page = await start(static_site(folder))
        relay = RelayServer(provider, tokens=[TOKEN], origins=origins(page))
        relay_url = await start(recorded(relay, seen))
        config = {"api": f"{relay_url}/v1/chat", "token": TOKEN}
        (folder / "config.json").write_text(json.dumps(config))
        driver = await in_browser(_start_chromium, tmp_path)
        try:
            yield Setup(f"{page}/", relay, seen, driver)
        finally:
            with trio.CancelScope(shield=True):
                await in_browser(driver.quit)
            nursery.cancel_scope.cancel()


# -- blocking browser steps ---------------------------------------------------------------------

#: What the page shows, read in one go.
SHOWN = """
const texts = (root, selector) => [...root.querySelectorAll(selector)].map(e => e.textContent);
const error = document.getElementById('error');
return {
  status: document.getElementById('status').dataset.status,
  error: error.hidden ? null : error.textContent,
  resume: document.body.dataset.resume ?? null,
  send: !document.getElementById('send').disabled,
  messages: [...document.querySelectorAll('#messages > li')].map(li => ({
    role: li.className,
    id: li.dataset.id,
    texts: texts(li, '.text'),
    tools: [...li.querySelectorAll('.tool')].map(t => ({
      name: t.dataset.name, state: t.dataset.state, text: t.textContent,
    })),
  })),
  kept: JSON.parse(sessionStorage.getItem(arguments[0]) ?? 'null'),
};
"""


def _shown(driver: WebDriver) -> dict[str, Any]:
    shown: dict[str, Any] = driver.execute_script(SHOWN, KEPT)
    return shown


def _answer(shown: dict[str, Any]) -> str:
    """The text of the page's last message, if it is the assistant's."""
    messages = shown["messages"]
    if not messages or messages[-1]["role"] != "assistant":
        return ""
    return "".join(messages[-1]["texts"])


def _until(
    driver: WebDriver, condition: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """What the page shows once ``condition`` holds of it (at most ``WAIT`` seconds)."""
    last: dict[str, Any] = {}

    def holds(driver: WebDriver) -> dict[str, Any] | Literal[False]:
        nonlocal last
        last = _shown(driver)
        return last if condition(last) else False

    try:
        shown: dict[str, Any] = WebDriverWait(driver, WAIT, poll_frequency=0.02).until(holds)
    except TimeoutException:
        raise AssertionError(
            f"timed out waiting for {what}; the page shows {last!r}, "
            f"console errors: {_console_errors(driver)!r}"
        ) from None
    return shown


def _open(driver: WebDriver, page: str) -> None:
    driver.get(page)
    _until(driver, lambda shown: shown["status"] == "ready" and shown["send"], "the page to start")


def _send(driver: WebDriver, text: str) -> None:
    driver.find_element(By.ID, "prompt").send_keys(text)
    driver.find_element(By.ID, "send").click()


def _ask(driver: WebDriver, page: str, text: str, until: str) -> dict[str, Any]:
    """Open the page, send ``text``, and wait until the answer's text ends with ``until``
    and the chat is ready again."""
    _open(driver, page)
    _send(driver, text)
    return _until(
        driver,
        lambda shown: shown["status"] == "ready" and _answer(shown).endswith(until),
        "the answer",
    )


def _reload_mid_answer(driver: WebDriver, page: str, text: str) -> dict[str, Any]:
    """Send ``text``; once some of the answer shows, reload the page; then wait for the
    resumed answer to end."""
    _open(driver, page)
    _send(driver, text)
    during = _until(
        driver, lambda shown: len(_answer(shown)) >= 40, "the answer to begin streaming"
    )
    driver.refresh()
    after = _until(
        driver,
        lambda shown: shown["resume"] == "done" and shown["status"] == "ready",
        "the resumed answer to end",
    )
    return {"during": during, "after": after, "console": _console_errors(driver)}


def _refused(driver: WebDriver, page: str, text: str) -> dict[str, Any]:
    _open(driver, page)
    _send(driver, text)
    shown = _until(driver, lambda shown: shown["status"] == "error", "the chat's error")
    return {"shown": shown, "console": _console_errors(driver)}


# -- the tests ----------------------------------------------------------------------------------


def _texts(shown: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(message["role"], message["texts"]) for message in shown["messages"]]


def _requests(seen: Sequence[Seen]) -> list[tuple[str, str]]:
    return [(request.method, request.path) for request in seen]


async def test_the_page_sends_a_message_and_shows_the_streamed_answer(
    site: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    provider = ScriptedProvider(Reply(GREETING, chunk=5, delay=0.02))
    async with running(site, tmp_path, provider) as setup:
        shown = await in_browser(_ask, setup.driver, setup.page, "Say hello.", GREETING)
        console = await in_browser(_console_errors, setup.driver)
        assert _texts(shown) == [("user", ["Say hello."]), ("assistant", [GREETING])]
        assert shown["error"] is None
        assert shown["resume"] is None  # a fresh page: nothing to resume
        assert console == []
        # The page keeps its chat: the same messages, under the chat id it sent.
        kept = shown["kept"]
        assert [message["id"] for message in kept["messages"]] == [
            message["id"] for message in shown["messages"]
        ]
        # The model was asked once, with the user's text and the page's tool.
        (call,) = provider.calls
        assert [(m.role, m.content) for m in call.messages] == [(Role.USER, "Say hello.")]
        assert [tool.name for tool in call.tools] == ["lookup"]
        # Cross-origin: the browser asked the relay's leave first, from the page's origin.
        page_origin = setup.page.rstrip("/")
        assert _requests(setup.seen) == [("OPTIONS", "/v1/chat"), ("POST", "/v1/chat")]
        assert {request.origin for request in setup.seen} == {page_origin}
        statistics = setup.relay.statistics()
        assert statistics.refused == {}
        assert statistics.upstream_calls == 1


async def test_a_reload_mid_answer_resumes_it_to_its_end(
    site: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # About 100 deltas 0.04 s apart: four seconds of answer, the reload lands in its middle.
    provider = ScriptedProvider(Reply(LONG, chunk=6, delay=0.04))
    async with running(site, tmp_path, provider) as setup:
        seen = await in_browser(_reload_mid_answer, setup.driver, setup.page, "Write a lot.")
        during, after = seen["during"], seen["after"]
        # The reload came mid-answer: part of it shown, still streaming.
        partial = _answer(during)
        assert during["status"] == "streaming"
        assert LONG.startswith(partial)
        assert len(partial) < len(LONG)
        # After it, the page shows the chat it kept and the whole answer, once.
        assert _texts(after) == [("user", ["Write a lot."]), ("assistant", [LONG])]
        assert after["error"] is None
        assert after["messages"][-1]["id"] == during["messages"][-1]["id"]
        assert seen["console"] == []
        # The rest came from the run under way: the model was not asked again, and the page
        # asked the relay for the chat it kept (the resume route, its own preflight first).
        assert len(provider.calls) == 1
        chat_id = after["kept"]["id"]
        resume = f"/v1/chat/{chat_id}/stream"
        assert _requests(setup.seen) == [
            ("OPTIONS", "/v1/chat"),
            ("POST", "/v1/chat"),
            ("OPTIONS", resume),
            ("GET", resume),
        ]
        statistics = setup.relay.statistics()
        assert statistics.upstream_calls == 1
        assert statistics.refused == {}


async def test_the_page_runs_the_models_tool_call_and_the_answer_goes_on(
    site: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    provider = ScriptedProvider(
        Reply("Checking.", calls=[ToolCall("call_1", "lookup", {"q": "trio"})]),
        Reply("The page found it.", chunk=4, delay=0.01),
    )
    async with running(site, tmp_path, provider) as setup:
        shown = await in_browser(
            _ask, setup.driver, setup.page, "Look trio up.", "The page found it."
        )
        console = await in_browser(_console_errors, setup.driver)
        output = {"found": "trio is looked up by the page"}
        # One answer: the call, the page's result, and what the model said after it.
        assert _texts(shown) == [
            ("user", ["Look trio up."]),
            ("assistant", ["Checking.", "The page found it."]),
        ]
        (tool,) = shown["messages"][-1]["tools"]
        assert tool == {
            "name": "lookup",
            "state": "output-available",
            "text": f'lookup({{"q":"trio"}}) -> {json.dumps(output, separators=(",", ":"))}',
        }
        assert shown["error"] is None
        assert console == []
        # The page sent the conversation again by itself, its result after the model's call.
        first, second = provider.calls
        assert [m.role for m in first.messages] == [Role.USER]
        assert [m.role for m in second.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
        assert json.loads(second.messages[-1].content) == output
        # (The browser keeps the relay's preflight answer: one for both requests.)
        assert _requests(setup.seen) == [
            ("OPTIONS", "/v1/chat"),
            ("POST", "/v1/chat"),
            ("POST", "/v1/chat"),
        ]


async def test_an_origin_the_relay_does_not_allow_is_stopped_at_the_preflight(
    site: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    provider = ScriptedProvider(Reply(GREETING))
    elsewhere = "http://127.0.0.1:9"  # the relay allows only this origin, not the page's
    async with running(site, tmp_path, provider, origins=lambda page: [elsewhere]) as setup:
        seen = await in_browser(_refused, setup.driver, setup.page, "Say hello.")
        shown = seen["shown"]
        assert _texts(shown) == [("user", ["Say hello."])]  # no answer
        assert shown["error"]  # the chat says it failed (the browser's words)
        assert any("CORS" in line for line in seen["console"]), seen["console"]
        # The browser never sent the request: the preflight was refused, the model not asked.
        assert _requests(setup.seen) == [("OPTIONS", "/v1/chat")]
        statistics = setup.relay.statistics()
        assert statistics.refused == {"forbidden_origin": 1}
        assert statistics.upstream_calls == 0
        assert provider.calls == []
