"""Run one script of a docs page -- a block, with the blocks marked as continuing it -- in this
fresh interpreter, as ``python script.py`` would, recording what its stated prints write.

``docs_pages.run_page`` starts one interpreter per script and sends it, on stdin, a JSON object:
``filename`` (the page, named in tracebacks), ``blocks`` (each block's code, padded with newlines
so that line numbers are the page's), ``stated`` (the ``[first, last]`` lines of each stated
print) and ``report`` (a file to write, at the end, what each stated print wrote: a JSON list of
lists of strings, in ``stated``'s order). The parent compares that with what the page states.

This module imports only what every interpreter has loaded at start (and ``json``, whose
submodules its own import loads), so a block that uses a module it did not import -- ``trio.
testing`` after ``import trio`` -- fails here as it fails for a reader.
"""

import builtins
import io
import json
import os
import sys
import types
from typing import Any


def main() -> int:
    payload = json.loads(sys.stdin.read())
    filename: str = payload["filename"]
    ranges = [tuple(pair) for pair in payload["stated"]]
    written: list[list[str]] = [[] for _ in ranges]
    by_line = {
        line: index for index, (first, last) in enumerate(ranges) for line in range(first, last + 1)
    }
    real_print = builtins.print

    def recording_print(*args: Any, **kwargs: Any) -> None:
        target = kwargs.get("file")
        if target is not None and target is not sys.stdout:
            real_print(*args, **kwargs)
            return
        buffer = io.StringIO()
        real_print(*args, **{**kwargs, "file": buffer})
        text = buffer.getvalue()
        sys.stdout.write(text)
        if kwargs.get("flush"):
            sys.stdout.flush()
        frame = sys._getframe(1)
        if frame.f_code.co_filename == filename:
            index = by_line.get(frame.f_lineno)
            if index is not None:
                written[index].append(text)

    # As `python script.py` in the current folder: that folder first on the path, the script
    # the __main__ module, nothing of this runner's in its namespace.
    sys.path[0] = os.getcwd()
    sys.argv = [os.path.join(os.getcwd(), "script.py")]
    script = types.ModuleType("__main__")
    script.__file__ = sys.argv[0]
    sys.modules["__main__"] = script
    namespace = script.__dict__
    builtins.print = recording_print
    status = 0
    try:
        for code in payload["blocks"]:
            exec(compile(code, filename, "exec", dont_inherit=True), namespace)
    except SystemExit as error:  # as a script's exit: its status
        code = error.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if status:
            real_print(f"the script exited with status {code!r}", file=sys.stderr)
    except BaseException:  # shown to the parent, which fails the page
        import traceback

        kind, error, trace = sys.exc_info()
        # From the script's own frames: this runner's exec() is not the reader's business.
        traceback.print_exception(kind, error, trace.tb_next if trace is not None else None)
        status = 1
    finally:
        builtins.print = real_print
        sys.stdout.flush()
        with open(payload["report"], "w", encoding="utf-8") as report:
            json.dump(written, report)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
