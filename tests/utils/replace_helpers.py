"""A rename that a signal stops: `os.replace` onto one path raises `KeyboardInterrupt` (what
Ctrl-C between a write and its rename does), every other rename runs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from cvbench.utils import io


@contextlib.contextmanager
def interrupted_replace(monkeypatch, target: Path) -> Iterator[None]:
    """Inside the block, `cvbench.utils.io`'s renames onto `target` raise KeyboardInterrupt."""
    real = os.replace

    def interrupted(src, dst, *args, **kwargs):
        if Path(dst) == Path(target):
            raise KeyboardInterrupt
        return real(src, dst, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(io.os, "replace", interrupted)
        yield
