"""`cvbench.data.grain.augment.keep_freed_memory`: the decoding process asks glibc's malloc to
reuse freed blocks (each image's half-megabyte arrays) instead of mapping them afresh."""

from __future__ import annotations

import io
import platform
import threading

import numpy as np
import pytest
from PIL import Image

from cvbench.data.grain import augment

pytestmark = pytest.mark.backend_agnostic


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 200, 30)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def test_decoding_asks_for_the_allocator_setting_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(augment, "_tuned", threading.Event())  # a process that never decoded
    monkeypatch.setattr(augment, "keep_freed_memory", lambda: calls.append(1) or True)
    first = augment.decode_image(_jpeg())
    second = augment.decode_image(_jpeg())
    assert calls == [1]
    assert np.array_equal(first, second) and first.shape == (6, 8, 3)


def test_the_settings_are_glibcs_mmap_and_trim_thresholds():
    seen = []

    class Libc:
        def mallopt(self, param, value):
            seen.append((param, value))
            return 1

    assert augment.keep_freed_memory(Libc())
    # malloc.h: M_MMAP_THRESHOLD = -3, M_TRIM_THRESHOLD = -1; 32 MiB is glibc's ceiling
    assert seen == [(-3, 32 * 2**20), (-1, 256 * 2**20)]


def test_a_refused_setting_or_no_mallopt_says_false():
    class Refusing:
        def mallopt(self, param, value):
            return 0

    assert augment.keep_freed_memory(Refusing()) is False
    assert augment.keep_freed_memory(object()) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_glibc_takes_the_settings():
    assert augment.keep_freed_memory() is True
