"""A structured-output run's answer while it streams: ``output`` chunks of the partial object.

The run loop (:mod:`actors._run_loop`) makes one :class:`OutputStream` for a run that asks
for ``output=`` and whose chunks somebody reads (a run without ``output=``, or one nobody
streams -- ``generate()`` -- pays nothing); it feeds the stream every content delta of each
provider call, and :class:`OutputStream` emits an ``output`` :class:`~actors.Chunk` whenever
the partial object (:class:`protocols.toolschema.PartialOutput`) changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocols.errors import ProtocolError, ValidationError
from protocols.partial_json import NOTHING
from protocols.toolschema import PartialOutput

if TYPE_CHECKING:
    from ._run_loop import Chunk, _Run

__all__ = ["OutputStream", "output_stream"]


class OutputStream:
    """The partial outputs of one run. Each provider call of the run is an *attempt* (numbered
    from 1): its content is read from the start -- a structured-output retry, a call after a
    tool turn, a fallback provider's member answering again after a rewind. A new attempt
    after one that showed something first emits an ``output`` chunk whose ``output`` is
    ``None`` (the partial is reset). Content that cannot be JSON (a tool turn's words) shows
    nothing for the rest of its attempt."""

    __slots__ = ("_chunk", "_partial", "_run", "_shown", "_stopped", "attempt")

    def __init__(
        self, run: _Run, schema: dict[str, Any], chunk: type[Chunk], *, strings: bool
    ) -> None:
        self._run = run
        self._chunk = chunk
        self._partial = PartialOutput(schema, strings=strings)
        #: The attempt in flight (0: none began yet).
        self.attempt = 0
        self._shown = False  # the attempt emitted a partial
        self._stopped = False  # the attempt's content is not JSON: read no more of it

    def begin(self) -> None:
        """A provider call begins, or the one in flight starts over (a rewind): a new
        attempt, read from its first delta."""
        self.attempt += 1
        if self._shown:
            self._shown = False
            self._emit(None)
        self._partial.reset()
        self._stopped = False

    def feed(self, text: str) -> None:
        """A content delta of the attempt in flight (after its own chunk was shown)."""
        if self._stopped:
            return
        try:
            changed = self._partial.feed(text)
        except ProtocolError:  # not JSON (or too long): this attempt shows no more
            self._stopped = True
            return
        if changed:
            self._shown = True
            self._emit(self._partial.value)

    def end(self) -> None:
        """The attempt's stream ended whole: a number at the very end of its text is complete
        now."""
        if self._stopped or not self._partial.reader.fed:
            return
        try:
            changed = self._partial.close()
        except ProtocolError:
            self._stopped = True
            return
        if changed:
            self._shown = True
            self._emit(self._partial.value)

    def _emit(self, value: Any) -> None:
        run = self._run
        live = run.live
        seq = live.last if live is not None else 0  # the content event it follows
        shown = None if value is NOTHING else value
        run.emit(
            self._chunk(
                "output",
                run_id=run.run_id,
                seq=seq,
                output=shown,
                attempt=self.attempt,
            )
        )


def output_stream(run: _Run, schema: dict[str, Any], chunk: type[Chunk]) -> OutputStream | None:
    """The output stream of a structured run whose chunks somebody reads (else ``None``:
    nothing is parsed; also for a schema jsonschema refuses, which the run refuses before
    this is asked); ``chunk``: the chunk class (the run loop's)."""
    request = run.request
    if request.forward is None and request.send is None:
        return None
    strings = bool(run.agent._option(request.options, "partial_strings"))
    try:
        return OutputStream(run, schema, chunk, strings=strings)
    except ValidationError:
        return None
