"""`--backend` and `--devices` of `cvbench train`: the Keras backend, and the devices of JAX
data parallelism.

`--backend` sets `KERAS_BACKEND` for the run, so it must come before Keras starts (the
command imports Keras only after parsing); `--deterministic` on JAX adds XLA's determinism
flag to `XLA_FLAGS` before JAX starts (`cvbench.training.determinism`). On JAX the Trainer
trains on every local device (`keras.distribution.DataParallel`); `--devices N` takes the
first N of each process. Several processes (one command per host, or several on one host)
are started with the variables `keras.distribution.initialize()` reads, the same three on
every process but its id:

    KERAS_DISTRIBUTION_JOB_ADDRESSES=host0:1234 KERAS_DISTRIBUTION_NUM_PROCESSES=2 \\
    KERAS_DISTRIBUTION_PROCESS_ID=0 cvbench train --backend jax ...

Each process says at once that it waits for the coordinator, again every 10 s, and stops with
one line naming the address after `--coordinator-timeout` seconds (default 120).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cvbench.cli.args import positive_int
from cvbench.cli.errors import CLIError
from cvbench.utils.launch import jax_processes

BACKENDS = ("tensorflow", "jax")


def add_backend_flags(p: argparse.ArgumentParser) -> None:
    """Adds --backend and --devices to `p`."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="the Keras backend (default: KERAS_BACKEND, else tensorflow); jax trains on "
        "every local device through keras.distribution",
    )
    p.add_argument(
        "--coordinator-timeout",
        type=positive_int,
        default=None,
        metavar="SECONDS",
        help="JAX backend, several processes (KERAS_DISTRIBUTION_*): how long processes wait "
        "for the coordinator and for each other at start (default: 120)",
    )
    p.add_argument(
        "--devices",
        type=positive_int,
        default=None,
        help="JAX backend: train on the first N local devices of each process (default: all)",
    )


def _deterministic_xla() -> None:
    import keras

    if keras.config.backend() == "jax":
        from cvbench.training import request_deterministic_xla

        request_deterministic_xla()  # XLA reads XLA_FLAGS once, when JAX starts


def distribution_from_args(args: argparse.Namespace) -> Any:
    """The Trainer's distribution for --backend / --devices ("auto" without --devices);
    sets `KERAS_BACKEND` for --backend first, then (--deterministic on JAX) XLA's
    determinism flag, before anything starts JAX.

    Raises:
        CLIError: Keras already runs another backend; --devices or --coordinator-timeout
            without JAX, or more devices than there are.
        ConnectionError: the JAX coordinator did not answer within --coordinator-timeout.
    """
    backend = getattr(args, "backend", None)
    if backend is not None:
        keras = sys.modules.get("keras")
        running = keras.config.backend() if keras is not None else None
        if running is not None and running != backend:
            raise CLIError(f"--backend {backend}: Keras already runs the {running} backend")
        os.environ["KERAS_BACKEND"] = backend
    if getattr(args, "deterministic", False):
        _deterministic_xla()
    devices = getattr(args, "devices", None)
    timeout = getattr(args, "coordinator_timeout", None)
    if devices is None and timeout is None:
        return "auto"
    import keras

    if keras.config.backend() != "jax":
        flag = "--devices" if devices is not None else "--coordinator-timeout"
        raise CLIError(
            f"{flag} is for the JAX backend (--backend jax), not {keras.config.backend()}"
        )
    from cvbench.training.jax_distributed import COORDINATOR_TIMEOUT_S, JaxDataParallel

    if devices is None and jax_processes() <= 1:
        return "auto"  # one process: no coordinator to wait for
    try:
        return JaxDataParallel(
            devices=devices, coordinator_timeout_s=timeout or COORDINATOR_TIMEOUT_S
        )
    except ValueError as e:
        raise CLIError(f"--devices {devices}: {e}" if devices is not None else str(e)) from None
