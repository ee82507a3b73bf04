"""``parse_sse``: the server-sent events parser, fed the same stream cut every possible way."""

from __future__ import annotations

import pytest

from nitro_assistants.client.sse import ServerSentEvent, parse_sse

# One stream with every feature: a comment, a named event with multi-line JSON data, an id,
# non-JSON data, multi-byte UTF-8 (2- and 4-byte characters), and CRLF, CR and LF line endings,
# ending with an event that has no blank line after it.
SAMPLE = (
    b": keep-alive comment\r\n"
    b"event: metadata\r\n"
    b'data: {"run_id": "r-1",\r\n'
    b'data:  "attempt": 1}\r\n'
    b"id: 7\r\n"
    b"\r\n"
    b"event: values\r"
    b'data: {"text": "caf\xc3\xa9 \xf0\x9f\x98\x80"}\r'
    b"\r"
    b"data: not json at all\n"
    b"data: second line\n"
    b"\n"
    b"event: end\n"
    b"data: null"
)
EXPECTED = [
    ServerSentEvent(
        event="metadata",
        data={"run_id": "r-1", "attempt": 1},
        id="7",
        raw='{"run_id": "r-1",\n "attempt": 1}',
    ),
    ServerSentEvent(
        event="values",
        data={"text": "café 😀"},
        id="7",
        raw='{"text": "café 😀"}',
    ),
    ServerSentEvent(
        event="message",
        data="not json at all\nsecond line",
        id="7",
        raw="not json at all\nsecond line",
    ),
    ServerSentEvent(event="end", data=None, id="7", raw="null"),
]


def test_whole_stream():
    assert list(parse_sse([SAMPLE])) == EXPECTED


def test_text_chunks_are_accepted():
    assert list(parse_sse([SAMPLE.decode()])) == EXPECTED


@pytest.mark.parametrize("cut", range(len(SAMPLE) + 1))
def test_split_at_every_byte(cut):
    # Includes cuts inside "é" and "😀" and between every "\r" and "\n".
    assert list(parse_sse([SAMPLE[:cut], SAMPLE[cut:]])) == EXPECTED


def test_one_byte_at_a_time():
    assert list(parse_sse(SAMPLE[i : i + 1] for i in range(len(SAMPLE)))) == EXPECTED


def test_split_at_every_pair_of_points_with_empty_chunks():
    # Three chunks, the middle one possibly empty: an empty chunk between "\r" and "\n" must not
    # turn the CRLF into two line endings (which would cut the event in two).
    for first in range(len(SAMPLE) + 1):
        for second in range(first, min(first + 4, len(SAMPLE)) + 1):
            chunks = [SAMPLE[:first], SAMPLE[first:second], SAMPLE[second:]]
            assert list(parse_sse(chunks)) == EXPECTED, (first, second)


def test_empty_chunk_between_cr_and_lf_keeps_one_line_ending():
    events = list(parse_sse([b"data: a\r", b"", b"\ndata: b\r\n\r\n"]))
    assert [e.data for e in events] == ["a\nb"]


@pytest.mark.parametrize("ending", ["\r\n", "\r", "\n"])
def test_each_line_ending(ending):
    text = ending.join(["event: values", 'data: {"a": 1}', "", "data: x", "", ""])
    events = list(parse_sse([text.encode()]))
    assert events == [
        ServerSentEvent(event="values", data={"a": 1}, raw='{"a": 1}'),
        ServerSentEvent(event="message", data="x", raw="x"),
    ]


def test_comments_only_and_empty_stream_yield_nothing():
    assert list(parse_sse([b": one\n", b": two\n\n"])) == []
    assert list(parse_sse([])) == []


def test_event_without_data_is_not_dispatched_and_name_does_not_leak():
    events = list(parse_sse([b"event: ping\n\ndata: 1\n\n"]))
    assert events == [ServerSentEvent(event="message", data=1, raw="1")]


def test_field_rules():
    # No space after the colon, only one leading space stripped, a bare "data" field, unknown
    # fields ignored, an id containing NUL ignored.
    stream = b"data:x\ndata:  two\ndata\nretry: 10\nfoo: bar\nid: a\x00b\n\n"
    assert list(parse_sse([stream])) == [
        ServerSentEvent(event="message", data="x\n two\n", raw="x\n two\n")
    ]


def test_last_line_without_any_ending():
    assert [e.data for e in parse_sse([b"data: 1\n\ndata: 2"])] == [1, 2]
    assert [e.data for e in parse_sse([b"data: 1\r"])] == [1]


def test_invalid_utf8_is_replaced_not_fatal():
    assert [e.data for e in parse_sse([b"data: \xff\n\n"])] == ["\ufffd"]
