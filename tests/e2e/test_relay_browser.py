"""The relay's browser chat page end to end: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium) against a :class:`RelayServer` on hypercorn, in front
of a :class:`Simulator` that paces its deltas in real time. Reloading the page mid-answer, at
random moments, shows the answer so far and continues it (the relay's runs, protocol version 3).

Selenium blocks, so every browser step runs in a worker thread (``trio.to_thread.run_sync``)
while the trio loop serves the page, the websocket and the simulator. Waits are explicit
(``WebDriverWait``); the one fixed wait is the check that a stopped answer stops growing.

Without Chromium these tests fail (never skip): install ``chromium`` and ``chromium-driver``
(``python scripts/test.py``, the README's test line, does).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import pytest
import trio
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.options import Options as ChromeOptions
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from actors.providers import OpenAIChat
from actors.relay import RelayServer, RelayToken, serve
from actors.testing import Simulator
from protocols import Message, ProviderOptions, ToolDefinition
from protocols.simulator import SimTurn, answer

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Without the background-networking flags, Chromium's own connections are refused on some
# machines (and it would phone home); --disable-quic keeps everything on plain loopback TCP.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1000,800",
)
TOKEN = "relay-browser-test-token-0123456789"
PACE = 0.05  # real seconds between the simulator's deltas: "count to 200" streams for 10 s
WAIT = 20.0  # real seconds any one page condition may take

T = TypeVar("T")
LAST_ANSWER = "#messages li.assistant:last-child"


class ReasoningOpenAIChat(OpenAIChat):
    """``sim.openai()``, asking for low reasoning effort where the page asks for reasoning
    (``think``): the page's "Ask for reasoning" box should show the simulator's thinking here.
    (The effort is a model setting: ``extra`` may not set a key the adapter writes itself.)"""

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> Any:
        if options is not None and options.think:
            options = attrs.evolve(options, reasoning_effort="low")
        return super().stream(messages, tools=tools, options=options)


def _require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: the relay page test drives Debian's Chromium. "
            "Install it with: apt-get install chromium chromium-driver "
            "(python scripts/test.py, the README's test line, does this).",
            pytrace=False,
        )


def _launch(tmp_path: pathlib.Path, attempt: int) -> WebDriver:
    options = ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / f'chromium-profile-{attempt}'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager is never run, so nothing is downloaded.
    service = ChromeService(CHROMEDRIVER, log_output=str(tmp_path / f"chromedriver-{attempt}.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


def _start_chromium(tmp_path: pathlib.Path) -> WebDriver:
    """A fresh headless Chromium. Selenium picks chromedriver's port by binding port 0 and
    letting it go, which another process may take first: a failed start is tried again."""
    for attempt in (1, 2):
        with contextlib.suppress(WebDriverException):
            return _launch(tmp_path, attempt)
    try:
        return _launch(tmp_path, 3)
    except WebDriverException as error:
        log = tmp_path / "chromedriver-3.log"
        said = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        raise AssertionError(f"Chromium did not start; chromedriver said:\n{said}") from error


async def wait_for(condition: Callable[[], bool], step: float = 0.01) -> None:
    """Poll ``condition`` every ``step`` seconds, a bounded number of times."""
    for _ in range(int(WAIT / step)):
        if condition():
            return
        await trio.sleep(step)
    pytest.fail(f"the condition still does not hold after {WAIT} s")


async def in_browser(step: Callable[..., T], *args: Any) -> T:
    """Run a blocking Selenium step in a thread, the trio loop serving meanwhile."""
    return await trio.to_thread.run_sync(functools.partial(step, *args))


@asynccontextmanager
async def running(
    tmp_path: pathlib.Path, token: RelayToken | str = TOKEN
) -> AsyncIterator[tuple[Simulator, RelayServer, str, WebDriver]]:
    """A paced simulator, a relay in front of it served on a free port, and a fresh Chromium."""
    _require_chromium()
    async with Simulator(interval=PACE) as simulator:
        provider = ReasoningOpenAIChat(
            model="simulator", base_url=simulator.openai_base_url, api_key=""
        )
        relay = RelayServer(provider, tokens=[token])
        try:
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(functools.partial(serve, relay, port=0))
                driver = await in_browser(_start_chromium, tmp_path)
                try:
                    yield simulator, relay, bound[0], driver
                finally:
                    with trio.CancelScope(shield=True):
                        await in_browser(driver.quit)
                nursery.cancel_scope.cancel()
        finally:
            await provider.aclose()


# -- blocking browser steps ---------------------------------------------------------------------


def _text(element: WebElement) -> str:
    return str(element.get_property("textContent"))


def _page(driver: WebDriver) -> str:
    """What the page shows, for failure messages."""
    parts = [f"{name}={_text(driver.find_element(By.ID, name))!r}" for name in ("status", "error")]
    parts.append(f"messages={_text(driver.find_element(By.ID, 'messages'))[-400:]!r}")
    parts.append(f"console={_console_errors(driver)!r}")
    return ", ".join(parts)


def _until(driver: WebDriver, condition: Callable[[WebDriver], T], what: str) -> T:
    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.05).until(condition)
    except TimeoutException:
        raise AssertionError(
            f"timed out waiting for {what}; the page shows {_page(driver)}"
        ) from None


def _by_id(driver: WebDriver, name: str) -> WebElement:
    return driver.find_element(By.ID, name)


def _state(driver: WebDriver, selector: str) -> str | None:
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return found[0].get_attribute("data-state") if found else None


def _console_errors(driver: WebDriver) -> list[str]:
    """Console errors: a CSP violation (an inline script or style), a failed load, a JS error."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _open_and_connect(driver: WebDriver, origin: str, token: str, *, remember: bool) -> None:
    driver.get(f"{origin}/")
    assert _by_id(driver, "status").get_attribute("data-state") == "disconnected"
    assert not _by_id(driver, "send").is_enabled()
    field = _by_id(driver, "token")
    assert field.get_attribute("type") == "password"
    field.send_keys(token)
    if remember:
        _by_id(driver, "remember").click()
    _by_id(driver, "connect").click()


def _refused(driver: WebDriver, origin: str) -> dict[str, Any]:
    _open_and_connect(driver, origin, "not-the-token-but-long-enough", remember=False)
    error = _until(
        driver,
        lambda d: "(unauthorized)" in _text(_by_id(d, "error")) and _by_id(d, "error"),
        "the unauthorized error",
    )
    _until(
        driver,
        lambda d: _by_id(d, "status").get_attribute("data-state") == "disconnected",
        "the status to say disconnected",
    )
    prompt = _by_id(driver, "prompt")
    # Shift+Enter adds a line; Enter sends -- but not while disconnected.
    prompt.send_keys("What is", Keys.SHIFT, Keys.ENTER, Keys.NULL, "2 + 3?", Keys.ENTER)
    return {
        "error": error.text,
        "error_visible": error.is_displayed(),
        "send_enabled": _by_id(driver, "send").is_enabled(),
        "connect_visible": _by_id(driver, "connect").is_displayed(),
        "messages": len(driver.find_elements(By.CSS_SELECTOR, "#messages li")),
        "prompt": prompt.get_property("value"),
        "stored": driver.execute_script("return sessionStorage.length"),
        "url": driver.current_url,
        "console": _console_errors(driver),
    }


def _ask_with_reasoning(driver: WebDriver, origin: str) -> dict[str, Any]:
    _open_and_connect(driver, origin, TOKEN, remember=True)
    _until(
        driver,
        lambda d: _by_id(d, "status").get_attribute("data-state") == "connected",
        "the connection",
    )
    assert _by_id(driver, "send").is_enabled()
    assert not _by_id(driver, "stop").is_enabled()
    _by_id(driver, "think").click()
    _by_id(driver, "prompt").send_keys("What is 2 + 3?", Keys.ENTER)
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "done", "the first answer")
    details = driver.find_element(By.CSS_SELECTOR, f"{LAST_ANSWER} details.thinking")
    # The reasoning box comes before the answer, and starts collapsed.
    order = driver.execute_script(
        "const li = arguments[0];"
        "return [...li.children].map(c => c.tagName.toLowerCase() + '.' + c.className);",
        driver.find_element(By.CSS_SELECTOR, LAST_ANSWER),
    )
    return {
        "user": _text(driver.find_element(By.CSS_SELECTOR, "#messages li.user .text")),
        "answer": _text(driver.find_element(By.CSS_SELECTOR, f"{LAST_ANSWER} .answer")),
        "thinking": _text(details.find_element(By.CSS_SELECTOR, ".text")),
        "open": details.get_attribute("open"),
        "order": order,
        "stored": driver.execute_script("return sessionStorage.getItem('trio-agents.relay.token')"),
        "url": driver.current_url,
        "send_enabled": _by_id(driver, "send").is_enabled(),
        "stop_enabled": _by_id(driver, "stop").is_enabled(),
    }


def _count_then_stop(driver: WebDriver) -> dict[str, Any]:
    _by_id(driver, "think").click()  # reasoning off again
    _by_id(driver, "prompt").send_keys("count to 200")
    _by_id(driver, "send").click()
    streamed = f"{LAST_ANSWER} .answer"
    _until(
        driver,
        lambda d: len(_text(d.find_element(By.CSS_SELECTOR, streamed)).split()) >= 10,
        "ten numbers to stream",
    )
    assert _state(driver, LAST_ANSWER) == "streaming"
    during = {
        "stop": _by_id(driver, "stop").is_enabled(),
        "send": _by_id(driver, "send").is_enabled(),
    }
    _by_id(driver, "stop").click()
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "stopped", "the answer to be marked stopped")
    # "stopped" is set when the relay's abort frame arrives, and on one connection the abort
    # comes after every delta of its request: from here on nothing may be added (the page
    # drops frames of a finished request). Checked again after another exchange below.
    answer_now = _text(driver.find_element(By.CSS_SELECTOR, streamed))
    _until(driver, lambda d: not _by_id(d, "stop").is_enabled(), "Stop to be disabled")
    answer_later = _text(driver.find_element(By.CSS_SELECTOR, streamed))
    return {
        "during": during,
        "first": answer_now,
        "later": answer_later,
        "note": _text(driver.find_element(By.CSS_SELECTOR, f"{LAST_ANSWER} .note")),
        "stop_enabled": _by_id(driver, "stop").is_enabled(),
        "send_enabled": _by_id(driver, "send").is_enabled(),
    }


def _ask_again(driver: WebDriver) -> tuple[str, list[str]]:
    """The third answer, and the text of every answer on the page once it is in."""
    _by_id(driver, "prompt").send_keys("Hello there", Keys.ENTER)
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "done", "the third answer")
    answers = driver.find_elements(By.CSS_SELECTOR, "#messages li.assistant .answer")
    return _text(answers[-1]), [_text(answer) for answer in answers]


def _refused_request(driver: WebDriver, origin: str) -> dict[str, Any]:
    _open_and_connect(driver, origin, TOKEN, remember=False)
    _until(
        driver,
        lambda d: _by_id(d, "status").get_attribute("data-state") == "connected",
        "the connection",
    )
    _by_id(driver, "prompt").send_keys("Hello", Keys.ENTER)
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "done", "the first answer")
    _by_id(driver, "prompt").send_keys("Hello again", Keys.ENTER)
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "error", "the refusal")
    return {
        "note": _text(driver.find_element(By.CSS_SELECTOR, f"{LAST_ANSWER} .note")),
        "error": _text(_by_id(driver, "error")),
        "prompt": _by_id(driver, "prompt").get_property("value"),
        "status": _by_id(driver, "status").get_attribute("data-state"),
        "send_enabled": _by_id(driver, "send").is_enabled(),
        "stop_enabled": _by_id(driver, "stop").is_enabled(),
        "console": _console_errors(driver),
    }


def _connection_lost(driver: WebDriver) -> dict[str, Any]:
    error = _until(
        driver,
        lambda d: "(shutdown)" in _text(_by_id(d, "error")) and _by_id(d, "error"),
        "the shutdown error",
    )
    _until(
        driver,
        lambda d: _by_id(d, "status").get_attribute("data-state") != "connected",
        "the status to leave 'connected'",
    )
    return {
        "error": error.text,
        "send_enabled": _by_id(driver, "send").is_enabled(),
        "connect_visible": _by_id(driver, "connect").is_displayed(),
        "console": _console_errors(driver),
    }


def _answer_text(driver: WebDriver) -> str:
    return _text(driver.find_element(By.CSS_SELECTOR, f"{LAST_ANSWER} .answer"))


def _numbers(driver: WebDriver) -> int:
    found = driver.find_elements(By.CSS_SELECTOR, f"{LAST_ANSWER} .answer")
    return len(_text(found[0]).split()) if found else 0


def _reload_while_answering(
    driver: WebDriver, question: str, marks: Sequence[int], *, reconnect: bool = True
) -> dict[str, Any]:
    """Ask ``question``; each time the answer shows at least the next of ``marks`` numbers,
    reload the page at once. Then let the answer finish. With ``reconnect`` false the token is
    not remembered: after each reload the page is connected again by hand."""
    _by_id(driver, "prompt").send_keys(question, Keys.ENTER)
    checks = []
    for mark in marks:
        _until(
            driver,
            lambda d, mark=mark: _numbers(d) >= mark or _state(d, LAST_ANSWER) == "done",
            f"{mark} numbers to stream",
        )
        before = _answer_text(driver)
        driver.refresh()
        after = _answer_text(driver)  # drawn from the tab's storage as the page loaded
        check = {"mark": mark, "before": before, "after": after}
        check["state"] = _state(driver, LAST_ANSWER)
        check["note"] = _text(driver.find_element(By.CSS_SELECTOR, LAST_ANSWER))
        if not reconnect:
            _by_id(driver, "token").send_keys(TOKEN)
            _by_id(driver, "connect").click()
        _until(
            driver,
            lambda d: _state(d, LAST_ANSWER) in ("streaming", "done"),
            "the answer to go on after the reload",
        )
        checks.append(check)
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "done", "the answer to finish")
    return {
        "checks": checks,
        "final": _answer_text(driver),
        "users": [_text(e) for e in driver.find_elements(By.CSS_SELECTOR, "li.user .text")],
        "answers": [_text(e) for e in driver.find_elements(By.CSS_SELECTOR, "li.assistant")],
        "console": _console_errors(driver),
    }


# -- the tests ----------------------------------------------------------------------------------


async def test_a_wrong_token_shows_an_error_and_never_reaches_the_model(
    tmp_path: pathlib.Path,
) -> None:
    async with running(tmp_path) as (simulator, relay, origin, driver):
        seen = await in_browser(_refused, driver, origin)
        assert seen["error"] == "unauthorized (unauthorized)"
        assert seen["error_visible"]
        assert not seen["send_enabled"]
        assert seen["connect_visible"]
        assert seen["messages"] == 0  # Enter did not send
        assert seen["prompt"] == "What is\n2 + 3?"  # and kept what was typed
        assert seen["stored"] == 0  # not remembered: nothing in sessionStorage
        assert seen["url"] == f"{origin}/"  # and never in the URL
        assert seen["console"] == []
        statistics = relay.statistics()
        assert statistics.refused == {"unauthorized": 1}
        assert statistics.upstream_calls == 0
        assert simulator.statistics().requests == 0


async def test_the_page_streams_keeps_the_conversation_and_stops_an_answer(
    tmp_path: pathlib.Path,
) -> None:
    async with running(tmp_path) as (simulator, relay, origin, driver):
        # 1. Connect, ask with reasoning on (sent with Enter): the answer streams in complete.
        first = await in_browser(_ask_with_reasoning, driver, origin)
        expected = answer(simulator.requests[0])
        assert simulator.requests[0].think
        assert first["user"] == "What is 2 + 3?"
        assert "5" in first["answer"]
        assert first["answer"] == expected.text
        assert first["thinking"].strip() == expected.thinking.strip() != ""
        assert first["open"] is None  # collapsed
        assert first["order"] == ["p.who", "details.thinking", "div.text answer"]
        assert first["stored"] == TOKEN  # "remember for this tab" was ticked
        assert TOKEN not in first["url"]
        assert first["send_enabled"]
        assert not first["stop_enabled"]

        # 2. A long answer: Stop cuts it; what streamed stays, marked stopped, and stops growing.
        stopped = await in_browser(_count_then_stop, driver)
        assert stopped["during"] == {"stop": True, "send": False}
        assert stopped["first"] == stopped["later"]
        numbers = stopped["first"].split()
        assert len(numbers) >= 10
        assert numbers == [str(n) for n in range(1, len(numbers) + 1)]
        assert len(numbers) < 200
        assert stopped["note"] == "Stopped."
        assert not stopped["stop_enabled"]
        assert stopped["send_enabled"]
        # The relay closed the upstream stream: the simulator saw its client leave mid-answer.
        await wait_for(lambda: simulator.statistics().abandoned == 1)
        counters = simulator.statistics()
        assert (counters.completed, counters.abandoned, counters.streaming) == (1, 1, 0)
        assert relay.statistics().streams == 0

        # 3. The conversation goes on, the whole of it sent each time, the stopped partial too.
        third, answers = await in_browser(_ask_again, driver)
        assert third == answer(simulator.requests[2]).text == "You said: Hello there"
        assert answers[1] == stopped["first"]  # the stopped answer never grew afterwards
        assert [(turn.role, turn.text) for turn in simulator.requests[1].turns] == [
            ("user", "What is 2 + 3?"),
            ("assistant", expected.text),
            ("user", "count to 200"),
        ]
        assert simulator.requests[2].turns[3:] == (
            SimTurn("assistant", stopped["first"]),
            SimTurn("user", "Hello there"),
        )
        assert relay.statistics().upstream_calls == 3

        # 4. The relay goes away: the page says so and stops offering to send.
        relay.close()
        lost = await in_browser(_connection_lost, driver)
        assert lost["error"] == "the relay is shutting down (shutdown)"
        assert not lost["send_enabled"]
        assert lost["connect_visible"]
        assert lost["console"] == []


async def test_a_refused_request_is_shown_in_its_answer_and_can_be_asked_again(
    tmp_path: pathlib.Path,
) -> None:
    one_a_minute = RelayToken(TOKEN, per_minute=1)
    async with running(tmp_path, one_a_minute) as (simulator, relay, origin, driver):
        seen = await in_browser(_refused_request, driver, origin)
        message = "too many requests; try again later (rate_limited)"
        assert seen["note"] == f"Error: {message}"
        assert seen["error"] == message
        assert seen["prompt"] == "Hello again"  # given back, to ask again later
        assert seen["status"] == "connected"  # a refused request leaves the connection open
        assert seen["send_enabled"]
        assert not seen["stop_enabled"]
        assert seen["console"] == []
        assert relay.statistics().refused == {"rate_limited": 1}
        assert relay.statistics().upstream_calls == 1
        assert len(simulator.requests) == 1


def _connected(driver: WebDriver, origin: str, *, remember: bool) -> None:
    _open_and_connect(driver, origin, TOKEN, remember=remember)
    _until(
        driver,
        lambda d: _by_id(d, "status").get_attribute("data-state") == "connected",
        "the connection",
    )


def _ask_and_wait(driver: WebDriver, question: str) -> str:
    _by_id(driver, "prompt").send_keys(question, Keys.ENTER)
    _until(driver, lambda d: _state(d, LAST_ANSWER) == "done", "the answer")
    return _answer_text(driver)


def _numbered(count: int) -> str:
    return " ".join(str(n) for n in range(1, count + 1))


async def test_reloading_mid_answer_shows_it_so_far_and_continues_it(
    tmp_path: pathlib.Path,
) -> None:
    """Reload at random moments of the answer (by how much of it is shown): each time the page
    shows at once what it showed before (and maybe more), then continues; in the end the whole
    answer stands, no number twice and none missing, and the upstream was called once."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    marks = sorted(rng.sample(range(1, 75), 4))
    async with running(tmp_path) as (simulator, relay, origin, driver):
        await in_browser(functools.partial(_connected, remember=True), driver, origin)
        seen = await in_browser(_reload_while_answering, driver, "count to 80", marks)
        # The conversation survived the reloads: the next question carries all of it.
        again = await in_browser(_ask_and_wait, driver, "Hello there")
    whole = _numbered(80)
    assert seen["final"] == whole == answer(simulator.requests[0]).text, (seed, seen)
    for check in seen["checks"]:
        # What was shown before the reload is shown at once after it, and nothing else.
        assert check["after"].startswith(check["before"]), (seed, check)
        assert whole.startswith(check["after"]), (seed, check)
        assert check["state"] in ("interrupted", "streaming", "done"), (seed, check)
    # (The marks are below 80: the reloads came while it streamed.)
    assert any(len(check["before"].split()) < 80 for check in seen["checks"]), (seed, seen)
    assert seen["users"] == ["count to 80"]
    assert len(seen["answers"]) == 1
    assert seen["console"] == []
    assert again == "You said: Hello there"
    assert [(turn.role, turn.text) for turn in simulator.requests[1].turns] == [
        ("user", "count to 80"),
        ("assistant", whole),
        ("user", "Hello there"),
    ]
    assert relay.statistics().upstream_calls == 2  # the reloads never asked the model again


async def test_a_reload_without_a_remembered_token_continues_once_connected_again(
    tmp_path: pathlib.Path,
) -> None:
    async with running(tmp_path) as (simulator, relay, origin, driver):
        await in_browser(functools.partial(_connected, remember=False), driver, origin)
        seen = await in_browser(
            functools.partial(_reload_while_answering, reconnect=False),
            driver,
            "count to 40",
            [5, 20],
        )
    assert seen["final"] == _numbered(40) == answer(simulator.requests[0]).text, seen
    for check in seen["checks"]:
        assert check["after"].startswith(check["before"]), check
        if check["state"] == "interrupted":  # not connected yet: it says what to do
            assert "Connect to see the rest of this answer." in check["note"]
    assert relay.statistics().upstream_calls == 1
