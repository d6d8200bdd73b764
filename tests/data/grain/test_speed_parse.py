"""`records.parse_example` reads the nested messages through a memoryview: the image's bytes
are copied once (into the returned value), not once per message level."""

from __future__ import annotations

import tracemalloc

import pytest

from cvbench.data.grain.records import parse_example
from cvbench.data.tfrecord import imagenet_example

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic

MB = 1 << 20


@pytest.mark.parametrize("boxes", [[], [(0.1, 0.2, 0.5, 0.75), (0.0, 0.0, 1.0, 1.0)]])
def test_the_image_bytes_are_copied_once(boxes):
    """A 1 MiB image value: the parse's peak allocation is that copy plus small change
    (under 1.1 MiB); slicing bytes at each level (Example, Features, map entry, Feature,
    BytesList) made more copies (a 5.0 MiB peak, measured before the change)."""
    encoded = b"\xff\xd8\xff" + bytes(range(256)) * (4096 - 1) + b"\x00" * 253
    assert len(encoded) == MB
    record = imagenet_example(
        encoded=encoded, height=2, width=3, label=7, synset="n1", text="seven",
        filename="a.JPEG", boxes=boxes,
    )  # fmt: skip
    tracemalloc.start()
    try:
        parsed = parse_example(record)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert type(parsed["encoded"]) is bytes and parsed["encoded"] == encoded
    assert parsed["label"] == 6 and parsed["filename"] == "a.JPEG"
    assert parsed["boxes"].shape == (len(boxes), 4)
    assert MB <= peak < 1.1 * MB, peak / MB
