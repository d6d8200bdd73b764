"""A small real disk for full-disk tests: a tmpfs mounted for one test, resized to free space.

Mounting needs root (CI runs as root); elsewhere the test is skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


class SmallDisk:
    """A tmpfs at `path`: `mount(size)` mounts it with `size` bytes (a later call remounts it
    with the new size, keeping its files); `unmount()` at the end of the test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mounted = False

    def mount(self, size: int) -> Path:
        if shutil.which("mount") is None:
            pytest.skip("cannot fill a disk here: no mount command to make a tmpfs with")
        if os.geteuid() != 0:
            pytest.skip("cannot fill a disk here: mounting a tmpfs needs root (CI runs as root)")
        if self.mounted:
            args = ["-o", f"remount,size={size}", str(self.path)]
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            args = ["-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.path)]
        result = subprocess.run(["mount", *args], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(
                f"cannot fill a disk here: `mount {' '.join(args)}` was refused "
                f"({result.stderr.strip() or result.returncode})"
            )
        self.mounted = True
        return self.path

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False


def read_only(path: Path) -> Path:
    """An empty read-only tmpfs at `path` (root ignores permission bits; a mount does not);
    `subprocess.run(["umount", path])` at the end of the test. Skipped, saying why, where
    mounting is refused."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)])
    if done.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    return path
