"""`records._fields` reads one-byte varints itself (keys, values and lengths under 128) and
leaves longer ones to `_varint`: the same fields at the 127 / 128 boundaries, the same
errors for a truncated message, and no `_varint` call for a record of small fields."""

from __future__ import annotations

import pytest

from cvbench.data.grain import records
from cvbench.data.grain.records import parse_example
from cvbench.data.tfrecord import imagenet_example

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def test_fields_at_the_one_byte_boundaries():
    # field 15 is the last one-byte key (15 << 3 | 7 = 127), field 16 the first two-byte one
    message = (
        _key(1, 0) + _varint(127)  # a one-byte value
        + _key(2, 0) + _varint(128)  # two bytes: 0x80 0x01
        + _key(15, 2) + _varint(127) + b"a" * 127  # a one-byte length
        + _key(16, 2) + _varint(128) + b"b" * 128  # a two-byte key and length
        + _key(17, 5) + b"\x01\x02\x03\x04"  # fixed32
        + _key(3, 1) + b"12345678"  # fixed64
        + _key(4, 0) + _varint(2**64 - 1)  # ten bytes
    )  # fmt: skip
    got = [(f, w, v if isinstance(v, int) else bytes(v)) for f, w, v in records._fields(message)]
    assert got == [
        (1, 0, 127),
        (2, 0, 128),
        (15, 2, b"a" * 127),
        (16, 2, b"b" * 128),
        (17, 5, b"\x01\x02\x03\x04"),
        (3, 1, b"12345678"),
        (4, 0, 2**64 - 1),
    ]
    assert list(records._fields(memoryview(message))) == [
        (f, w, v if isinstance(v, int) else memoryview(v)) for f, w, v in got
    ]


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (_key(1, 0), "truncated or overlong varint"),  # a key, then nothing
        (_key(1, 2), "truncated or overlong varint"),  # a length missing
        (_key(1, 0) + b"\x80", "truncated or overlong varint"),  # a varint cut short
        (_key(16, 2)[:1], "truncated or overlong varint"),  # a two-byte key cut short
        (_key(1, 2) + _varint(5) + b"abc", "field 1 runs past the end"),
        (_key(2, 5) + b"ab", "field 2 runs past the end"),
        (_key(1, 3), "unsupported protobuf wire type 3"),
    ],
)
def test_a_truncated_message_is_a_value_error(message, error):
    with pytest.raises(ValueError, match=error):
        list(records._fields(message))


def test_a_record_of_small_fields_calls_varint_for_its_long_lengths_only(monkeypatch):
    calls = []
    original = records._varint

    def counted(data, pos):
        calls.append(pos)
        return original(data, pos)

    monkeypatch.setattr(records, "_varint", counted)
    record = imagenet_example(
        encoded=b"\xff\xd8\xff" + b"x" * 200, height=2, width=3, label=7, synset="n1",
        text="seven", filename="a.JPEG", boxes=[(0.1, 0.2, 0.5, 0.75)],
    )  # fmt: skip
    parsed = parse_example(record)
    assert parsed["label"] == 6 and parsed["encoded"] == b"\xff\xd8\xff" + b"x" * 200
    # lengths of 128 or more: the Features message, the image/encoded entry, its Feature
    # and its BytesList, and the image's bytes (203): 5 calls, and the packed label's value
    # (read by `_feature_values`): 6; every key and every other length or value is one
    # byte (one call per varint before: 121)
    assert len(calls) == 6
