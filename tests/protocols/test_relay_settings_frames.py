"""Relay frames and model settings (issue 24, item 1), without an event loop: what version 2
adds (settings in a stream frame's options, the cap in ready), and that a frame without them
is one a version 1 peer decodes."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from test_settings import settings_strategy

from protocols.errors import ProtocolError, ValidationError
from protocols.messages import Message, ProviderOptions
from protocols.relay import (
    PROTOCOL_VERSION,
    SETTINGS_FIELDS,
    VERSIONS,
    ReadyFrame,
    StreamFrame,
    decode_client_frame,
    decode_server_frame,
    encode_frame,
    unsupported_options,
)
from protocols.settings import ModelSettings

#: The options fields of protocol version 1: all a server from before version 2 decodes.
OPTIONS_V1 = {"think", "schema", "max_tokens", "temperature", "tool_choice", "stop", "extra"}


def test_version_2_is_still_understood_and_1_too() -> None:
    assert PROTOCOL_VERSION == 3  # (version 3, runs: test_relay_run_frames.py)
    assert VERSIONS == (1, 2, 3)
    names = {field.name for field in attrs.fields(ProviderOptions)}
    assert names - OPTIONS_V1 == set(SETTINGS_FIELDS)


def test_ready_carries_the_cap_from_version_2() -> None:
    ready = ReadyFrame(2, 1024, 4, max_tokens=500)
    text = encode_frame(ready)
    assert json.loads(text) == {
        "type": "ready",
        "version": 2,
        "max_frame": 1024,
        "max_streams": 4,
        "max_tokens": 500,
    }
    assert decode_server_frame(text) == ready
    # no cap, no field: what a version 1 client decodes
    assert set(json.loads(encode_frame(ReadyFrame(1, 1024, 4)))) == {
        "type",
        "version",
        "max_frame",
        "max_streams",
    }
    with pytest.raises(ValidationError, match="max_tokens needs version 2"):
        ReadyFrame(1, 1024, 4, max_tokens=500)
    with pytest.raises(ProtocolError):
        decode_server_frame(
            '{"type":"ready","version":2,"max_frame":9,"max_streams":9,"max_tokens":0}'
        )


@given(settings=settings_strategy)
def test_a_stream_frame_carries_exactly_the_set_settings(settings: ModelSettings) -> None:
    options = ProviderOptions.from_settings(settings, think=True)
    frame = StreamFrame("r1", [Message.user("hi")], options=options)
    text = encode_frame(frame)
    assert decode_client_frame(text) == frame
    sent = set(json.loads(text).get("options", {}))
    new = {name for name in SETTINGS_FIELDS if getattr(settings, name) is not None}
    assert sent - OPTIONS_V1 == new  # without them, a frame a version 1 relay decodes
    assert set(unsupported_options(options, 1)) == new
    assert unsupported_options(options, 2) == ()
    assert unsupported_options(None, 1) == ()
