"""Every ```python block in README.md and docs/*.md runs, and so does every examples/*.py script.

The runner (``docs_pages``, next to this file) holds the pages to three conventions, which
docs/index.md ("Writing the docs") states for writers:

1. **Blocks stand alone.** Each block runs as a script of its own -- in a fresh interpreter,
   in an empty temporary folder, as ``__main__`` -- and must import and define what it uses. A
   block whose first line is ``# continued from above`` runs after the block before it, in the
   same interpreter and namespace (the marker is refused where nothing from above is used, and
   on a page's first block). So every unmarked block can be copied alone and run, and a page's
   blocks pasted into one file top to bottom run too.
2. **Stated output is checked.** ``print(x)  # -> TEXT`` states that this print writes the line
   ``TEXT``; whole comment lines ``# -> TEXT`` right below a print state further lines. All a
   stated print writes while the page runs (every call, in order, the final newline dropped)
   must equal the stated lines. ``...`` matches any text, for output that legitimately varies.
   A stated print that never runs fails.
3. **No unchecked claims.** A comment after a print, or a comment line right below one, must be
   a ``# ->`` line; a ``# ->`` that belongs to no print is an error.

Pages that talk to real services read their endpoints from environment variables; for those
(``PAGE_ENVIRONMENTS``) the runner points the variables at offline simulators on 127.0.0.1 and
checks afterwards that each simulator was really called.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
import trio
from docs_pages import Block, PageError, blocks, foreign_names, matches, run_page, statements

from actors.testing import Simulator

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
#: The key the model page's examples find in $OPENAI_API_KEY / $ANTHROPIC_API_KEY under test.
DOCS_KEY = "sk-docs-test-key-0123456789"


# -- the environment of docs/models.md --------------------------------------------------------


@contextlib.contextmanager
def simulators() -> Iterator[tuple[Simulator, Simulator]]:
    """Two simulators served from a background thread: one that requires ``DOCS_KEY`` (for the
    hosted APIs) and one that takes no key (for local servers)."""
    started = threading.Event()
    servers: list[Simulator] = []
    stop: list[Callable[[], None]] = []
    failure: list[BaseException] = []

    async def serve() -> None:
        async with Simulator(api_key=DOCS_KEY) as keyed, Simulator() as local:
            servers.extend([keyed, local])
            token = trio.lowlevel.current_trio_token()
            done = trio.Event()
            stop.append(lambda: trio.from_thread.run_sync(done.set, trio_token=token))
            started.set()
            await done.wait()

    def thread() -> None:
        try:
            trio.run(serve)
        except BaseException as error:  # reported to the test below
            failure.append(error)
            started.set()

    runner = threading.Thread(target=thread, name="docs-simulators", daemon=True)
    runner.start()
    started.wait(30)
    if failure or len(servers) != 2:
        cause = failure[0] if failure else None
        raise RuntimeError("the docs simulators did not start") from cause
    try:
        yield servers[0], servers[1]
    finally:
        stop[0]()
        runner.join(30)


@contextlib.contextmanager
def model_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """docs/models.md: every variable its examples read, aimed at the simulators; afterwards,
    each adapter must have reached them with the page's default model names."""
    with simulators() as (keyed, local):
        port = local.base_url.rsplit(":", 1)[1]
        environment = {
            "OPENAI_API_KEY": DOCS_KEY,
            "OPENAI_BASE_URL": keyed.openai_base_url,
            "ANTHROPIC_API_KEY": DOCS_KEY,
            "ANTHROPIC_BASE_URL": keyed.base_url,
            "OLLAMA_HOST": f"127.0.0.1:{port}",  # as Ollama itself writes it: no scheme
            "VLLM_BASE_URL": local.openai_base_url,
            "LLAMA_BASE_URL": local.openai_base_url,
        }
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        yield
        hosted = {(request.vendor, request.model) for request in keyed.requests}
        assert hosted == {("openai", "gpt-4.1-mini"), ("anthropic", "claude-sonnet-4-5")}
        served = {(request.vendor, request.model) for request in local.requests}
        assert served == {
            ("ollama", "qwen3:8b"),  # native /api/chat
            ("openai", "qwen3:8b"),  # Ollama's /v1
            ("openai", "Qwen/Qwen3-8B"),  # vLLM
            ("openai", "local"),  # llama.cpp's llama-server
        }


PageEnvironment = Callable[[pytest.MonkeyPatch], contextlib.AbstractContextManager[None]]
#: Pages run with an environment of their own, by file name.
PAGE_ENVIRONMENTS: dict[str, PageEnvironment] = {"models.md": model_page}


# -- the pages and the examples ---------------------------------------------------------------


def test_there_is_something_to_run() -> None:
    assert len(DOCUMENTS) >= 3
    assert EXAMPLES
    assert sum(len(blocks(doc.read_text(encoding="utf-8"))) for doc in DOCUMENTS) >= 5
    for name in PAGE_ENVIRONMENTS:
        assert (ROOT / "docs" / name).exists()


def test_every_page_is_linked_from_the_index_and_every_link_resolves() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)", index))
    pages = {doc.name for doc in DOCUMENTS if doc.parent.name == "docs"} - {"index.md"}
    assert pages - linked == set(), "pages docs/index.md does not link"
    for doc in DOCUMENTS:
        for target in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)", doc.read_text("utf-8")):
            assert (doc.parent / target).exists(), f"{doc.name} links {target}, which is missing"


def test_the_readme_lists_every_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- \[docs/([\w-]+\.md)\]\(docs/\1\)", section, re.MULTILINE))
    pages = {doc.name for doc in DOCUMENTS if doc.parent.name == "docs"}
    assert pages - listed == set(), "pages the README's Documentation list leaves out"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_document_code_blocks_run(document: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environment = PAGE_ENVIRONMENTS.get(document.name)
    with environment(monkeypatch) if environment else contextlib.nullcontext():
        run_page(document.read_text(encoding="utf-8"), str(document))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: pathlib.Path) -> None:
    # Run as `python examples/x.py` would, through the runner so that stated outputs are checked.
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs" / "docs_pages.py"), str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{script.name} printed nothing"


# -- the runner itself ------------------------------------------------------------------------


def page(*codes: str) -> str:
    return "# A page\n\nSome words.\n\n" + "\n".join(f"```python\n{code}```\n" for code in codes)


def test_block_extraction_finds_blocks_and_their_lines() -> None:
    text = "# T\n\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = 2\n```\n"
    assert blocks(text) == [Block(4, "x = 1\n"), Block(11, "y = 2\n")]


def test_a_true_stated_output_passes() -> None:
    run_page(
        page(
            "x = 6 * 7\nprint(x)  # -> 42\nprint('a\\n\\nb')\n# -> a\n# ->\n# -> b\n",
            "for n in range(3):\n    print(n, 'id-%d' % (n * 1000))\n# -> 0 id-0\n"
            "# -> 1 id-...\n# -> 2 ...\n",
        ),
        "true.md",
    )


@pytest.mark.parametrize(
    "code",
    [
        "print(6 * 7)  # -> 43\n",  # the value is wrong
        "print('a')\n# -> a\n# -> b\n",  # a stated line is missing
        "print('a\\nb')  # -> a\n",  # an extra line
        "for n in range(2):\n    print(n)\n# -> 0\n",  # a second run is not stated
        "if False:\n    print('x')  # -> x\n",  # the print never runs
        "def f() -> None:\n    print('late')  # -> late\n",  # defined but never called
        "print('abc')  # -> a...d\n",  # the wildcard does not stretch past the end
    ],
)
def test_a_wrong_stated_output_fails(code: str) -> None:
    with pytest.raises(PageError, match=r"wrong\.md:\d+"):
        run_page(page(code), "wrong.md")


def test_the_failure_shows_both_outputs() -> None:
    with pytest.raises(PageError) as failure:
        run_page(page("print('the answer is', 41)  # -> the answer is 42\n"), "wrong.md")
    assert "the answer is 41" in str(failure.value)
    assert "the answer is 42" in str(failure.value)
    assert "wrong.md:6" in str(failure.value)


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("print(42)  # 42\n", "must state its output"),  # an old-style, unchecked comment
        ("print(42)\n# 42\n", "right below a print"),
        ("x = 42  # -> 42\n", "no print to check"),
        ("print(42)\n\n# -> 42\n", "no print to check"),  # detached by a blank line
    ],
)
def test_unchecked_claims_are_refused(code: str, problem: str) -> None:
    with pytest.raises(PageError, match=problem):
        run_page(page(code), "claims.md")


def test_a_stated_print_in_a_function_is_checked_where_it_is_called() -> None:
    good = page(
        "def show(x: int) -> None:\n    print(x)  # -> 7\n", "# continued from above\nshow(7)\n"
    )
    run_page(good, "calls.md")
    with pytest.raises(PageError, match="wrote\n8"):
        run_page(good.replace("show(7)", "show(8)"), "calls.md")


def test_a_block_that_uses_a_name_from_a_previous_block_fails_unless_marked() -> None:
    with pytest.raises(PageError, match="uses x without defining"):
        run_page(page("x = 1\n", "print(x + 1)\n"), "alone.md")
    run_page(page("x = 1\n", "# continued from above\nprint(x + 1)  # -> 2\n"), "alone.md")


def test_unmarked_blocks_run_in_fresh_namespaces() -> None:
    # Even a name the static check cannot see (read through globals()) is not carried over.
    with pytest.raises(PageError, match="KeyError: 'secret'"):
        run_page(page("secret = 1\n", "print(globals()['secret'])\n"), "fresh.md")


def test_a_block_leaning_on_a_module_an_earlier_block_loaded_fails() -> None:
    # `import trio` alone does not load trio.testing: copied alone, the second block fails.
    # In one shared interpreter the first block's import made it work (docs/agent.md had one).
    leaning = page("import trio.testing\n", "import trio\n\nprint(trio.testing.MockClock)\n")
    with pytest.raises(PageError) as failure:
        run_page(leaning, "lean.md")
    told = str(failure.value)
    assert "lean.md:10: the page's script 2 (lines 10-12) failed" in told
    assert "AttributeError: module 'trio' has no attribute 'testing'" in told
    assert "must `import trio.testing` itself" in told
    run_page(leaning.replace("import trio\n\n", "import trio.testing\n\n"), "lean.md")


def test_a_block_leaning_on_a_file_an_earlier_block_wrote_fails() -> None:
    wrote = "with open('notes.txt', 'w') as file:\n    file.write('kept')\n"
    read = "with open('notes.txt') as file:\n    print(file.read())  # -> kept\n"
    with pytest.raises(PageError, match=r"(?s)script 2 .*FileNotFoundError"):
        run_page(page(wrote, read), "files.md")
    run_page(page(wrote + read), "files.md")  # one block, one script: the file is there


def test_a_continued_block_runs_in_the_same_interpreter() -> None:
    run_page(
        page(
            "import trio.testing\n\nx = 1\n",
            "# continued from above\nprint(x, trio.testing.MockClock.__name__)  # -> 1 MockClock\n",
        ),
        "continued.md",
    )


def test_a_script_runs_as_main_as_a_pasted_file_does() -> None:
    # A block guarded by `if __name__ == "__main__":` runs (docs/deploy-relay.md's did not).
    run_page(page("if __name__ == '__main__':\n    print('ran')  # -> ran\n"), "main.md")


def test_every_failing_script_of_a_page_is_named() -> None:
    with pytest.raises(PageError) as failure:
        run_page(page("raise ValueError('one')\n", "x = 1\n", "raise KeyError('two')\n"), "bad.md")
    told = str(failure.value)
    assert "bad.md:6: the page's script 1 (lines 6-6) failed" in told
    assert "ValueError: one" in told
    assert "bad.md:14: the page's script 3 (lines 14-14) failed" in told
    assert "KeyError: 'two'" in told
    assert "script 2" not in told


def test_the_continuation_marker_is_refused_where_it_is_not_needed() -> None:
    with pytest.raises(PageError, match="first block cannot continue"):
        run_page(page("# continued from above\nx = 1\n"), "marked.md")
    with pytest.raises(PageError, match="uses nothing from the blocks above"):
        run_page(page("x = 1\n", "# continued from above\ny = 2\n"), "marked.md")


def test_foreign_names_sees_through_scopes() -> None:
    code = (
        "import trio\n"
        "def f() -> None:\n"
        "    global made\n"
        "    made = helper(trio, len)\n"
        "class C:\n"
        "    attribute = other\n"
        "values = [item for item in items if made]\n"
    )
    assert foreign_names(code) == {"helper", "other", "items"}


@pytest.mark.parametrize(
    "fence", ["```py", "```python3", "  ```python", "```pycon", "> ```python", "``` python"]
)
def test_a_python_block_the_runner_would_skip_is_refused(fence: str) -> None:
    text = f"# A page\n\n{fence}\nassert False\n```\n"
    with pytest.raises(PageError, match=r"stray\.md:3: a Python block must open"):
        run_page(text, "stray.md")


def test_other_languages_are_not_run() -> None:
    run_page("```bash\nexit 1\n```\n\n```text\nprint(1)  # 2\n```\n", "other.md")


def test_wildcards_match_any_text() -> None:
    assert matches("id ... done", "id 7f3a done")
    assert matches("...", "anything\nat all")
    assert matches("a...", "a")
    assert not matches("a...b", "a b c")
    assert not matches("42", "420")


def test_a_multi_line_print_states_its_output_after_its_last_line() -> None:
    code = "print(\n    'spread',\n    'out',\n)  # -> spread out\n"
    (statement,) = statements(code, "multi.py")
    assert (statement.first, statement.last, statement.stated) == (1, 4, ("spread out",))
    run_page(page(code), "multi.md")


def test_an_example_script_states_its_output_too(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "example.py"
    script.write_text("print('hello', 'world')  # -> hello world\n", encoding="utf-8")
    runner = ROOT / "tests" / "docs" / "docs_pages.py"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(runner), str(script)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    passed = run()
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout == "hello world\n"
    script.write_text("print('hello', 'moon')  # -> hello world\n", encoding="utf-8")
    failed = run()
    assert failed.returncode == 1
    assert "hello moon" in failed.stderr
