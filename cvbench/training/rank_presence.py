"""Which Horovod ranks are gone: each rank listens on a small TCP port of its interface while
it lives (`Presence`); a survivor of a failed collective asks every other rank's port
(`answers`) and names the ranks that no longer answer, grouped by host (`lost_ranks`), since
Horovod's own error only says that it was shut down."""

from __future__ import annotations

import os
import re
import socket
import threading


class Presence:
    """A TCP port on `address` that accepts (and closes) connections while this process
    lives: another rank that cannot connect knows this one is gone (or unreachable)."""

    def __init__(self, address: str | None) -> None:
        self._socket = socket.create_server((address or "", 0))
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._serve, name="cvbench-presence", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            connection.close()


def answers(address: str | None, port: int | None, timeout_s: float = 3.0) -> bool:
    """Whether the presence port of a rank at `address` accepts a connection."""
    if address is None or port is None:
        return True  # nothing to ask: not counted as lost
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def interface_address() -> str | None:
    """The IPv4 address of Gloo's interface (`HOROVOD_GLOO_IFACE`, which horovodrun sets from
    `--network-interface`), else of this host's name; None when neither resolves."""
    iface = os.environ.get("HOROVOD_GLOO_IFACE")
    if iface:
        try:
            import psutil  # a Horovod dependency

            for addr in psutil.net_if_addrs().get(iface, []):
                if addr.family == socket.AF_INET:
                    return addr.address
        except ImportError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


def lost_ranks(
    rank: int, hosts: list[str], addresses: list[str | None], ports: list[int | None], text: str
) -> str:
    """`; rank 0 runs on hostA, lost ranks 2, 3 on host hostB (10.27.0.2)`: the ranks whose
    presence port no longer answers (else those at an address the error `text` names),
    grouped by host; `; rank 0 runs on hostA` when none is found."""
    here = f"; rank {rank} runs on {hosts[rank]}"
    others = [r for r in range(len(hosts)) if r != rank]
    lost = [r for r in others if not answers(addresses[r], ports[r])]
    if not lost:
        named = set(re.findall(r"(\d{1,3}(?:\.\d{1,3}){3})", text))
        lost = [r for r in others if addresses[r] in named]
    if not lost:
        return here
    groups = []
    for host in dict.fromkeys(hosts[r] for r in lost):
        ranks = [r for r in lost if hosts[r] == host]
        word = "rank" if len(ranks) == 1 else "ranks"
        names = ", ".join(str(r) for r in ranks)
        groups.append(f"{word} {names} on host {host} ({addresses[ranks[0]]})")
    return f"{here}, lost " + "; ".join(groups)
