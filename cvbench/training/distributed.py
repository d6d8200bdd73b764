"""The Horovod bridge, and `get_distribution`, which picks the Trainer's `Distribution` by
who launched the process (`cvbench.utils.launch`): Horovod, JAX data parallelism or one
process.

A `Distribution` (`cvbench.training.distribution_base`, imported from here too) gives the
Trainer rank/size, a gradient reduction that runs inside the compiled train step, and
host-side collectives (broadcast, sums) used between steps. Horovod is optional:
`SingleProcess` needs nothing, `Horovod` imports `horovod.tensorflow` only when created, and
the TensorFlow backend is required for it (Horovod's Keras wrappers do not support Keras 3,
so only `horovod.tensorflow` primitives are used).

Gradients are averaged by an allreduce placed in the optimizer's `apply`, i.e. before
`LossScaleOptimizer` checks them: the still-scaled gradients are averaged, so a non-finite
gradient on any rank makes the average non-finite on every rank, and every rank skips the same
step and halves its loss scale the same way.

Failure handling: `horovodrun` ends the other ranks when one exits non-zero. A rank that hangs
instead (or a launcher that does not watch its workers) is caught by Horovod's stall check: the
defaults set here make the survivors fail with an error after `stall_shutdown_s` seconds
(60) in a collective that some rank never joined. `HOROVOD_GLOO_TIMEOUT_SECONDS` (30 here)
bounds the connection set-up at start. Variables set in the environment win over these defaults.

Several hosts: at start every rank prints one line naming its rank and host (`cvbench: rank 2
of 4 on host hostB, local rank 0 of 2`), and every rank learns every rank's host and Gloo
interface address (`Horovod.hosts`, `Horovod.addresses`), and each rank listens on a TCP port
of that address that answers as long as the process lives. When a host is lost, a survivor's
error names the ranks and hosts that no longer answer (`rank_failure`): Horovod's own error
says only that it was shut down.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence

import keras
import numpy as np

from cvbench.training.distribution_base import Distribution, RankFailedError, SingleProcess
from cvbench.training.rank_presence import Presence, interface_address, lost_ranks
from cvbench.utils.launch import (
    HOROVOD_RUN_VARS,
    MPI_CONTACT_VARS,
    launch_from_env,
    mpi_rank_variables,
)

_HOROVOD_INSTALL_HINT = (
    "Horovod is not installed: run scripts/build_horovod.sh (Horovod 0.28.1 built for the "
    "installed TensorFlow), or pip install 'cvbench[horovod]' where a wheel exists"
)
#: Seconds to wait for horovodrun's rendezvous server to accept a connection.
_RENDEZVOUS_CHECK_S = 5.0


def launched_by_horovod() -> bool:
    """Whether this process was started by horovodrun / mpirun (rank variables present;
    `cvbench.utils.launch.Launch.horovod`)."""
    return launch_from_env().horovod


def check_launcher_environment(
    environ: Mapping[str, str] | None = None, *, mpi_built: bool | None = False
) -> None:
    """Raises `ValueError` when the environment names Horovod ranks but no launcher started
    this process: variables left from another job (an exported `HOROVOD_RANK`, a shell
    inside an `mpirun` allocation). Horovod's C++ start-up would otherwise wait 30 s and
    abort (`gloo::IoException`) with no line of cvbench's, or train alone as rank 0 of 1.

    A horovodrun (Gloo) rank has the rendezvous address and port, and the rendezvous server
    answers there; an MPI rank has its launcher's contact variables (`MPI_CONTACT_VARS` of
    `cvbench.utils.launch`)
    and a Horovod built with MPI (`mpi_built`).

    Args:
        environ: the environment (default `os.environ`).
        mpi_built: whether the installed Horovod was built with MPI; None: not known yet
            (Horovod not imported), not checked.

    Example:
        >>> check_launcher_environment({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: HOROVOD_RANK=1, HOROVOD_SIZE=2 are set but no launcher started this ...
        >>> check_launcher_environment({"PATH": "/bin"})  # no ranks: nothing to check
    """
    env = os.environ if environ is None else environ
    horovod = [name for name in HOROVOD_RUN_VARS if name in env]
    mpi = mpi_rank_variables(env)
    if "HOROVOD_RANK" in env and not mpi:
        addr, port = (
            env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"),
            env.get("HOROVOD_GLOO_RENDEZVOUS_PORT"),
        )
        if not addr or not port:
            problem = "no HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT"
        else:
            problem = _unreachable(addr, port)
        if problem:
            raise ValueError(_stale(horovod, env, problem, "horovodrun"))
    elif mpi:
        names = mpi + horovod
        if not any(n.startswith(MPI_CONTACT_VARS) for n in env):
            problem = "no MPI launcher contact variable (PMIX_SERVER_URI*, PMI_FD, ...)"
            raise ValueError(_stale(names, env, problem, "mpirun or horovodrun"))
        if mpi_built is False:
            raise ValueError(
                f"{_shown(names, env)} are set (an MPI launcher started this process) but "
                "this Horovod was built without MPI: start cvbench with horovodrun --gloo, or "
                f"unset {' '.join(names)} to train in one process"
            )


def _unreachable(addr: str, port: str) -> str:
    """Why horovodrun's rendezvous server at `addr:port` cannot be the launcher; "" when it
    accepts a connection."""
    try:
        with socket.create_connection((addr, int(port)), timeout=_RENDEZVOUS_CHECK_S):
            return ""
    except ValueError:
        return f"HOROVOD_GLOO_RENDEZVOUS_PORT={port!r} is not a port"
    except OSError as e:
        reason = e.strerror or type(e).__name__
        return f"no rendezvous server answers at {addr}:{port}: {reason}"


def _shown(names: list[str], env) -> str:
    return ", ".join(f"{n}={env[n]}" for n in names[:6]) + (", ..." if len(names) > 6 else "")


def _stale(names: list[str], env, problem: str, launcher: str) -> str:
    return (
        f"{_shown(names, env)} are set but no launcher started this process ({problem}): left from "
        f"another job? Unset {' '.join(names)} to train in one process, or start cvbench "
        f"with {launcher}"
    )


class Horovod(Distribution):
    """Data-parallel training over Horovod ranks (TensorFlow backend).

    Creating it calls `hvd.init()` and pins this rank's local GPU, so create it (or the
    Trainer) before any TensorFlow operation runs.

    Args:
        gloo_timeout_s: default for `HOROVOD_GLOO_TIMEOUT_SECONDS`.
        stall_check_s: default for `HOROVOD_STALL_CHECK_TIME_SECONDS` (warning).
        stall_shutdown_s: default for `HOROVOD_STALL_SHUTDOWN_TIME_SECONDS` (error).

    Raises:
        ImportError: with install instructions when Horovod is missing.
        ValueError: when the Keras backend is not TensorFlow; when the environment names
            ranks but no launcher started the process (`check_launcher_environment`).
    """

    name = "horovod"

    def __init__(
        self, *, gloo_timeout_s: int = 30, stall_check_s: int = 30, stall_shutdown_s: int = 60
    ) -> None:
        if keras.config.backend() != "tensorflow":
            raise ValueError(
                f"Horovod training needs KERAS_BACKEND=tensorflow, got {keras.config.backend()!r}"
            )
        # Before any call into Horovod's C++ (stale rank variables abort it with no message),
        # and before its import (they are no reason to install it).
        check_launcher_environment(mpi_built=None)
        try:
            import horovod.tensorflow as hvd
        except ImportError as e:
            raise ImportError(_HOROVOD_INSTALL_HINT) from e
        if mpi_rank_variables():
            check_launcher_environment(mpi_built=bool(hvd.mpi_built()))
        os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(gloo_timeout_s))
        os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(stall_check_s))
        os.environ.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", str(stall_shutdown_s))
        import tensorflow as tf

        hvd.init()
        self._hvd = hvd
        self._tf = tf
        self._counter = 0
        self.rank = hvd.rank()
        self.size = hvd.size()
        self.local_rank = hvd.local_rank()
        self.local_size = hvd.local_size()
        self.hosts = [socket.gethostname()]
        self.addresses = [interface_address()]
        self._ports: list[int | None] = [None]
        if self.size > 1:
            presence = Presence(self.addresses[0])
            me = (self.hosts[0], self.addresses[0], presence.port)
            gathered = hvd.allgather_object(me, name="cvbench.hosts")
            self.hosts = [h for h, _, _ in gathered]
            self.addresses = [a for _, a, _ in gathered]
            self._ports = [p for _, _, p in gathered]
            print(
                f"cvbench: rank {self.rank} of {self.size} on host {self.hosts[self.rank]}, "
                f"local rank {self.local_rank} of {self.local_size}",
                flush=True,
            )
        self._pin_gpu()

    def _pin_gpu(self) -> None:
        tf = self._tf
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return
        mine = gpus[self.local_rank % len(gpus)]
        try:
            tf.config.set_visible_devices(mine, "GPU")
            tf.config.experimental.set_memory_growth(mine, True)
        except RuntimeError as e:
            visible = tf.config.get_visible_devices("GPU")
            if visible != [mine]:
                raise RuntimeError(
                    f"rank {self.rank} could not pin GPU {self.local_rank}: TensorFlow was "
                    "initialised before the Trainer; create the Trainer (pass a function that "
                    "builds the model) before running TensorFlow operations"
                ) from e

    def _name(self, kind: str) -> str:
        # Eager Horovod ops need names that match across ranks: every rank calls the
        # collectives in the same order, so a counter does.
        self._counter += 1
        return f"cvbench.{kind}.{self._counter}"

    def gradient_reducer(self, compression: str = "none") -> Callable[[list], list]:
        """Returns a function averaging a list of gradients (None kept) over ranks."""
        hvd, tf = self._hvd, self._tf
        compressor = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none

        def reduce(grads: list) -> list:
            present = [i for i, g in enumerate(grads) if g is not None]
            dense = [tf.convert_to_tensor(grads[i]) for i in present]
            reduced = hvd.grouped_allreduce(dense, op=hvd.Average, compression=compressor)
            out = list(grads)
            for i, g in zip(present, reduced, strict=True):
                out[i] = g
            return out

        return reduce

    def wrap_optimizer(self, optimizer: keras.optimizers.Optimizer, compression: str = "none"):
        """Makes `optimizer.apply` average gradients over ranks first (in place).

        Wrap the outermost optimizer (the `LossScaleOptimizer` under mixed_float16), so the
        average is taken over the still-scaled gradients before the finite check.
        """
        if self.size == 1:
            return optimizer
        return with_gradient_reduction(optimizer, self.gradient_reducer(compression))

    def broadcast_variables(self, variables: Sequence[keras.Variable]) -> None:
        """Overwrites `variables` on every rank with rank 0's values."""
        tf_vars = [v.value if hasattr(v, "value") else v for v in variables]
        self._hvd.broadcast_variables(tf_vars, root_rank=0)

    def broadcast_object(self, obj):
        """Returns rank 0's `obj` on every rank (pickled)."""
        return self._hvd.broadcast_object(obj, root_rank=0, name=self._name("object"))

    def _allreduce(self, values: np.ndarray, op, kind: str) -> np.ndarray:
        tensor = self._tf.constant(np.asarray(values, dtype=np.float64))
        return self._hvd.allreduce(tensor, op=op, name=self._name(kind)).numpy()

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum over ranks (float64)."""
        return self._allreduce(values, self._hvd.Sum, "sum")

    def allreduce_mean(self, values: np.ndarray) -> np.ndarray:
        """Mean over ranks (float64)."""
        return self._allreduce(values, self._hvd.Average, "mean")

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        """Maximum over ranks (float64)."""
        return self._allreduce(values, self._hvd.Max, "max")

    def rank_failure(self, error: BaseException) -> RankFailedError | None:
        """Recognises the errors Horovod raises on the survivors when a rank dies."""
        text = str(error)
        markers = ("Horovod has been shut down", "Connection reset by peer", "Connection closed")
        from horovod.common.exceptions import HorovodInternalError

        if isinstance(error, HorovodInternalError) or any(m in text for m in markers):
            lines = [line.strip() for line in text.splitlines() if line.strip()] or [""]
            detail = next((line for line in lines if any(m in line for m in markers)), lines[0])
            return RankFailedError(
                f"rank {self.rank}: another rank failed or exited, so training stops"
                f"{self._lost(text)} (Horovod: {detail.strip()[:300]})"
            )
        return None

    def _lost(self, text: str) -> str:
        """`; rank 0 runs on hostA, lost ranks 2, 3 on host hostB (10.27.0.2)`
        (`rank_presence.lost_ranks`); "" without the ranks' hosts and presence ports."""
        if len(self.hosts) != self.size or len(self._ports) != self.size:
            return ""
        return lost_ranks(self.rank, self.hosts, self.addresses, self._ports, text)


class _GradientReduction:
    """Mixin placed before an optimizer class: reduces gradients, then the usual `apply`."""

    _cvbench_reduce: Callable[[list], list]

    def apply(self, grads, trainable_variables=None):
        grads = self._cvbench_reduce(list(grads))
        return super().apply(grads, trainable_variables)


def with_gradient_reduction(
    optimizer: keras.optimizers.Optimizer, reduce: Callable[[list], list]
) -> keras.optimizers.Optimizer:
    """Makes `optimizer.apply(grads, ...)` call `reduce(grads)` first (changes it in place).

    The optimizer's class is swapped for a subclass of it, so it stays an instance of its
    class, keeps its state, and serializes as before.
    """
    base = type(optimizer)
    if isinstance(optimizer, _GradientReduction):
        raise ValueError(f"optimizer {optimizer.name!r} already reduces its gradients")
    cls = type(
        base.__name__,
        (_GradientReduction, base),
        {"_cvbench_reduce": staticmethod(reduce), "__module__": base.__module__},
    )
    optimizer.__class__ = cls
    return optimizer


def split_gradient_reduction(optimizer) -> tuple[Callable[[list], list], Callable]:
    """`(reduce, apply)`: the average over ranks that `optimizer.apply` starts with (Horovod,
    `with_gradient_reduction`) and the `apply` that follows it, for a train step that decides
    on the averaged gradients before applying them; for an optimizer that averages nothing,
    the identity and `optimizer.apply`."""
    mixin = _GradientReduction
    if isinstance(optimizer, mixin):
        return optimizer._cvbench_reduce, super(mixin, optimizer).apply
    return (lambda grads: grads), optimizer.apply


def get_distribution(distribution: str | Distribution = "auto") -> Distribution:
    """Resolves the Trainer's `distribution` argument.

    Args:
        distribution: "auto" (Horovod when launched by horovodrun/mpirun; on the JAX backend
            `JaxDataParallel` over every local device, and every process the
            `KERAS_DISTRIBUTION_*` variables name, when there is more than one device;
            otherwise a single process on one device), "horovod", "jax", "single", or a
            `Distribution` instance.

    Raises:
        ValueError: for an unknown value.
        ImportError: when Horovod is asked for (or detected) but not installed.
    """
    if isinstance(distribution, Distribution):
        return distribution
    if distribution == "auto":
        return _auto()
    if distribution == "horovod":
        return Horovod()
    if distribution == "jax":
        from cvbench.training.jax_distributed import JaxDataParallel

        return JaxDataParallel()
    if distribution == "single":
        return SingleProcess()
    raise ValueError(
        "distribution must be 'auto', 'horovod', 'jax', 'single' or a Distribution, got "
        f"{distribution!r}"
    )


def _auto() -> Distribution:
    """Horovod when a Horovod launcher started this process; on JAX, `JaxDataParallel` when
    several processes are asked for or there are several local devices; else
    `SingleProcess`."""
    launch = launch_from_env()
    if launch.horovod:
        return Horovod()
    if keras.config.backend() != "jax":
        return SingleProcess()
    from cvbench.training.jax_distributed import JaxDataParallel

    if launch.jax:
        return JaxDataParallel()
    import jax

    return JaxDataParallel() if jax.local_device_count() > 1 else SingleProcess()
