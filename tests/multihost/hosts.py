"""Two simulated hosts on this machine: Linux network namespaces joined by a veth pair.

`TwoHosts(workdir)` builds, for `hostA` and `hostB`:

* a network namespace each (`cvb<pid>a`, `cvb<pid>b`) holding only `lo` and one end of a veth
  pair; both ends carry the same name (`cvb0`), so `horovodrun --network-interface cvb0` (and
  Gloo's `HOROVOD_GLOO_IFACE`) names an interface that exists on every host, as on a cluster
  whose nodes share an interface name. Addresses: hostA 10.27.0.1/24, hostB 10.27.0.2/24.
* its own UTS namespace (`hostname` says `hostA` / `hostB`) and mount namespace, in which the
  fixture's `hosts` file (hostA, hostB) is bind-mounted over `/etc/hosts` and its ssh client
  configuration over `/etc/ssh/ssh_config` (the fixture's key, no host-key check, no known
  hosts file written), so nothing on the real machine's `/etc` or `~/.ssh` changes;
* its own `sshd` (a host key and a client key the fixture makes, `PermitRootLogin yes`, the
  authorized key read from the fixture's directory).

`host.run(argv)` / `host.popen(argv)` run a command "on" a host (inside its namespaces).
`kill_host(name)` SIGKILLs every process of that host's network namespace (its sshd and every
rank it started): a machine lost. `close()` (the fixture calls it, also when a test fails) kills
every process left in both namespaces and deletes them; the files live in `workdir`.

Only the fixture's namespaces and loopback are ever contacted. Building the hosts needs root
(CAP_SYS_ADMIN and CAP_NET_ADMIN), `ip` (iproute2), `unshare` (util-linux) and `sshd`
(openssh-server): `unavailable_reason()` says which is missing.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

IFACE = "cvb0"
SUBNET = "10.27.0"
SSHD = "/usr/sbin/sshd"
SSH_PORT = 22


def unavailable_reason() -> str | None:
    """Why two namespaced hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "not root: network namespaces and sshd need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen", "mount"):
        if shutil.which(tool) is None:
            return f"{tool!r} is not installed (iproute2 / util-linux / openssh-client)"
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (apt-get install openssh-server)"
    probe = f"cvbprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    """One simulated host: `name` (its host name), `netns`, `address`, and how to enter it."""

    name: str
    netns: str
    address: str
    hosts_file: Path
    ssh_config: Path
    empty_dir: Path

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host: its network, UTS and mount namespaces."""
        mounts = [
            f"hostname {shlex.quote(self.name)}",
            f"mount --bind {shlex.quote(str(self.hosts_file))} /etc/hosts",
            f"mount --bind {shlex.quote(str(self.ssh_config))} /etc/ssh/ssh_config",
        ]
        user_ssh = Path.home() / ".ssh"
        if user_ssh.is_dir():  # a user ssh config must not decide (or record) anything here
            mounts.append(f"mount --bind {shlex.quote(str(self.empty_dir))} {user_ssh}")
        script = " && ".join(mounts) + ' && exec "$@"'
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", script, "sh", *argv]  # fmt: skip

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Starts `argv` on this host (`subprocess.Popen` keywords pass through)."""
        return subprocess.Popen(self.wrap(argv), **kwargs)

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Runs `argv` on this host (`subprocess.run` keywords pass through)."""
        return subprocess.run(self.wrap(argv), **kwargs)

    def pids(self) -> list[int]:
        """Every process in this host's network namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


class TwoHosts:
    """hostA and hostB with their sshd running (see the module docstring)."""

    names = ("hostA", "hostB")
    iface = IFACE
    namespaced = True

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        tag = f"cvb{os.getpid()}"
        self.hosts: dict[str, Host] = {}
        self._sshd: dict[str, subprocess.Popen] = {}
        self.identity_file = self.workdir / "id_ed25519"
        try:
            self._build(tag)
        except BaseException:
            self.close()
            raise

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Runs `argv` on hostA, where horovodrun (and so rank 0) runs."""
        return self.hosts["hostA"].run(argv, **kwargs)

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Starts `argv` on hostA."""
        return self.hosts["hostA"].popen(argv, **kwargs)

    def ssh_args(self) -> list[str]:
        """horovodrun's ssh flags for these hosts."""
        return ["--ssh-port", str(SSH_PORT), "--ssh-identity-file", str(self.identity_file)]

    def _build(self, tag: str) -> None:
        d = self.workdir
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
        subprocess.run([*keygen, "-f", str(self.identity_file)], check=True)
        subprocess.run([*keygen, "-f", str(d / "host_key")], check=True)
        (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
        (d / "empty").mkdir(exist_ok=True)
        names = {"hostA": (f"{tag}a", f"{SUBNET}.1"), "hostB": (f"{tag}b", f"{SUBNET}.2")}
        (d / "hosts").write_text(
            "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, (_, a) in names.items())
        )
        (d / "ssh_config").write_text(
            "Host *\n"
            f"  IdentityFile {self.identity_file}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR\n"
        )
        for name, (netns, address) in names.items():
            self.hosts[name] = Host(
                name, netns, address, d / "hosts", d / "ssh_config", d / "empty"
            )
        a, b = self.hosts["hostA"], self.hosts["hostB"]
        for host in (a, b):
            _ip("netns", "add", host.netns)
        # One veth pair, created with each end already in its namespace, under the same name.
        _ip("link", "add", IFACE, "netns", a.netns, "type", "veth", "peer", "name", IFACE,
            "netns", b.netns)  # fmt: skip
        for host in (a, b):
            _ip("-n", host.netns, "link", "set", "lo", "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", IFACE)
            _ip("-n", host.netns, "link", "set", IFACE, "up")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        for host in (a, b):
            self._start_sshd(host)
        for host in (a, b):
            self._wait_for_ssh(a, host)

    def _start_sshd(self, host: Host) -> None:
        d = self.workdir
        config = d / f"sshd_{host.name}.conf"
        config.write_text(
            f"ListenAddress {host.address}\n"
            f"Port {SSH_PORT}\n"
            f"HostKey {d / 'host_key'}\n"
            f"PidFile {d / f'sshd_{host.name}.pid'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
            "PermitRootLogin yes\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PrintMotd no\n"
            "MaxStartups 64\n"
            "MaxSessions 64\n"
        )
        log = open(d / f"sshd_{host.name}.log", "w")  # noqa: SIM115 (closed with the process)
        self._sshd[host.name] = host.popen(
            [SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def _wait_for_ssh(self, client: Host, server: Host, timeout_s: float = 30) -> None:
        deadline = time.time() + timeout_s
        while True:
            probe = client.run(
                ["ssh", "-o", "ConnectTimeout=5", server.name, "hostname"],
                capture_output=True,
                text=True,
            )
            if probe.returncode == 0 and probe.stdout.strip() == server.name:
                return
            if time.time() > deadline:
                log = (self.workdir / f"sshd_{server.name}.log").read_text()[-2000:]
                raise RuntimeError(
                    f"ssh from {client.name} to {server.name} failed: {probe.stderr.strip()}; "
                    f"sshd log: {log}"
                )
            time.sleep(0.2)

    def kill_host(self, name: str) -> list[int]:
        """SIGKILLs every process of host `name` (a machine lost); returns their pids."""
        pids = self.hosts[name].pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def close(self) -> None:
        """Kills every process left on both hosts and deletes the namespaces."""
        for name, host in self.hosts.items():
            self.kill_host(name)
            proc = self._sshd.get(name)
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            deadline = time.time() + 10
            while host.pids() and time.time() < deadline:
                self.kill_host(name)
                time.sleep(0.1)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)


def _ip(*args: str) -> None:
    run = subprocess.run(["ip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {run.stderr.strip()}")


class LoopbackHosts:
    """The fallback where namespaces cannot be made: Horovod's own trick, two host names of
    this machine (`-H localhost:2,127.0.0.1:2`), which horovodrun treats as two hosts (local
    ranks and cross ranks per name) over the loopback interface."""

    names = ("localhost", "127.0.0.1")
    iface = "lo"
    namespaced = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(argv, **kwargs)

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(argv, **kwargs)

    def ssh_args(self) -> list[str]:
        return []

    def close(self) -> None:
        pass
