"""A free TCP port on loopback, for the tests that start a coordinator (`jax.distributed`)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port no process listens on now (the OS's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
