"""The `two_hosts` fixture: hostA and hostB in network namespaces (see hosts.py), torn down
after the test whatever its outcome; where they cannot be built (not root), the loopback
fallback, with a warning saying why."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hosts import LoopbackHosts, TwoHosts, unavailable_reason  # noqa: E402


@pytest.fixture
def two_hosts(tmp_path_factory) -> Iterator[TwoHosts | LoopbackHosts]:
    reason = unavailable_reason()
    if reason is not None:
        warnings.warn(
            f"two namespaced hosts cannot be built ({reason}): running over Horovod's "
            "-H localhost:2,127.0.0.1:2 on loopback instead",
            stacklevel=1,
        )
        yield LoopbackHosts(reason)
        return
    hosts = TwoHosts(tmp_path_factory.mktemp("hosts"))
    try:
        yield hosts
    finally:
        hosts.close()
