"""Vendor wire formats, sans-IO: request encoders, record readers and the stream assembler.

Each vendor module turns the data model into that vendor's request body and each of its stream
records into an :class:`Increment`; :class:`StreamAssembler` folds increments into deltas and a
:class:`~protocols.messages.ProviderResult`. Readers tolerate fields they do not know (vendors add
fields all the time) but never skip a malformed record.
"""

from ._common import RETRYABLE_STATUSES as RETRYABLE_STATUSES
from ._common import classify_status as classify_status
from ._common import image_media_type as image_media_type
from ._stream import NOTHING as NOTHING
from ._stream import CallFragment as CallFragment
from ._stream import Increment as Increment
from ._stream import StreamAssembler as StreamAssembler

__all__ = [
    "NOTHING",
    "RETRYABLE_STATUSES",
    "CallFragment",
    "Increment",
    "StreamAssembler",
    "classify_status",
    "image_media_type",
]
