"""`cvbench.utils.launch`: who launched this process, its rank, size, local rank and local size,
from an environment given as a dict; and that every caller (the data readers' sharding, the
Trainer's `get_distribution`, the `cvbench` command) asks it."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from cvbench.utils.launch import (
    HOROVODRUN,
    JAX,
    MPIRUN,
    SINGLE,
    Launch,
    current_launch,
    jax_processes,
    launch_from_env,
    mpi_rank_variables,
)

pytestmark = pytest.mark.backend_agnostic

HVD = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1"}
OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}
PMI = {"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
KJAX = {"KERAS_DISTRIBUTION_PROCESS_ID": "1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}


@pytest.mark.parametrize(
    "env, expected",
    [
        # horovodrun -np 4 on two hosts of two: rank 1 is local rank 1 of 2
        ({**HVD, "HOROVOD_LOCAL_SIZE": "2"}, Launch(HOROVODRUN, 1, 4, 1, 2)),
        # a local rank without its size is no local rank: 0 of 1
        (HVD, Launch(HOROVODRUN, 1, 4, 0, 1)),
        # Open MPI: rank 3 of 4, local rank 1 of 2
        (
            {**OMPI, "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
            Launch(MPIRUN, 3, 4, 1, 2),
        ),
        (PMI, Launch(MPIRUN, 2, 3, 0, 2)),  # MPICH / Hydra
        (KJAX, Launch(JAX, 1, 2, 0, 1)),  # JAX names no local rank
        ({"PATH": "/bin"}, Launch(SINGLE, 0, 1, 0, 1)),
        # a rank variable whose pair says no rank: launched by horovodrun, rank 0 of 1
        ({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"}, Launch(HOROVODRUN, 0, 1, 0, 1)),
        ({"HOROVOD_RANK": "1"}, Launch(HOROVODRUN, 0, 1, 0, 1)),
        ({"HOROVOD_RANK": "-1", "HOROVOD_SIZE": "2"}, Launch(HOROVODRUN, 0, 1, 0, 1)),
        # horovodrun's MPI mode runs under mpirun: mpirun, Horovod's rank pair read first
        ({**HVD, **OMPI}, Launch(MPIRUN, 1, 4, 0, 1)),
        # Horovod's launchers before the JAX variables, as get_distribution picks Horovod first
        ({**PMI, **KJAX}, Launch(MPIRUN, 2, 3, 0, 2)),
        # the JAX count alone asks for two processes; no id: rank 0 of 1
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}, Launch(JAX, 0, 1, 0, 1)),
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "1"}, Launch(SINGLE, 0, 1, 0, 1)),
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": ""}, Launch(SINGLE, 0, 1, 0, 1)),
        # not a number: JAX, whose start names it (jax_processes)
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "two"}, Launch(JAX, 0, 1, 0, 1)),
        # the size variable alone names no launcher
        ({"OMPI_COMM_WORLD_SIZE": "2", "PMI_SIZE": "2"}, Launch(SINGLE, 0, 1, 0, 1)),
    ],
)
def test_launch_from_env(env, expected):
    assert launch_from_env(env) == expected


def test_horovod_and_jax_say_which_launcher():
    assert launch_from_env(HVD).horovod and launch_from_env(PMI).horovod
    assert not launch_from_env(HVD).jax
    assert launch_from_env(KJAX).jax and not launch_from_env(KJAX).horovod
    assert not launch_from_env({}).horovod and not launch_from_env({}).jax


def test_launch_is_frozen():
    with pytest.raises(AttributeError):
        Launch().rank = 1  # type: ignore[misc]


def test_launch_from_env_reads_os_environ_by_default(monkeypatch):
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "2")
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "3")
    assert launch_from_env() == Launch(JAX, 2, 3, 0, 1)


def test_jax_processes_and_a_count_that_is_not_a_number():
    assert jax_processes({}) == 1
    assert jax_processes({"KERAS_DISTRIBUTION_NUM_PROCESSES": ""}) == 1
    assert jax_processes({"KERAS_DISTRIBUTION_NUM_PROCESSES": "3"}) == 3
    with pytest.raises(ValueError) as e:
        jax_processes({"KERAS_DISTRIBUTION_NUM_PROCESSES": "two"})
    assert str(e.value) == "KERAS_DISTRIBUTION_NUM_PROCESSES must be an integer, got 'two'"


def test_mpi_rank_variables():
    env = {**OMPI, **PMI, "OMPI_MCA_x": "1", "HOME": "/h"}
    assert mpi_rank_variables(env) == [
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK",
        "PMI_SIZE",
    ]


def _fake_horovod(**calls):
    return types.SimpleNamespace(
        is_initialized=lambda: True, **{k: (lambda v=v: v) for k, v in calls.items()}
    )


def test_a_started_horovod_wins_over_the_variables(monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    hvd = _fake_horovod(rank=3, size=8, local_rank=1, local_size=4)
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", hvd)
    # the launcher is still the environment's; the ranks are Horovod's
    assert current_launch(HVD) == Launch(HOROVODRUN, 3, 8, 1, 4)
    # a Horovod that tells no local rank: the environment's local rank stays
    hvd = _fake_horovod(rank=3, size=8)
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", hvd)
    env = {**HVD, "HOROVOD_LOCAL_SIZE": "2"}
    assert current_launch(env) == Launch(HOROVODRUN, 3, 8, 1, 2)
    hvd.is_initialized = lambda: False  # imported, not started: the variables
    assert current_launch(env) == Launch(HOROVODRUN, 1, 4, 1, 2)


def test_a_started_jax_distributed_wins_over_the_variables(monkeypatch):
    monkeypatch.delitem(sys.modules, "horovod.tensorflow", raising=False)
    started = types.SimpleNamespace(is_initialized=lambda: True)
    jax = types.SimpleNamespace(
        distributed=started, process_index=lambda: 1, process_count=lambda: 2
    )
    monkeypatch.setitem(sys.modules, "jax", jax)
    assert current_launch({}) == Launch(SINGLE, 1, 2, 0, 1)
    started.is_initialized = lambda: False
    assert current_launch(KJAX) == Launch(JAX, 1, 2, 0, 1)


def test_the_launcher_module_imports_nothing_heavy():
    # the data readers and the CLI ask it before (or without) TensorFlow, Keras, JAX, Horovod
    code = (
        "import sys\n"
        "import cvbench.utils.launch\n"
        "heavy = ('tensorflow', 'keras', 'jax', 'horovod', 'numpy')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------ the callers
def test_the_data_shard_is_the_launchers(monkeypatch):
    from cvbench.data._distributed import rank_and_size, resolve_shards

    monkeypatch.delitem(sys.modules, "horovod.tensorflow", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    for env in (HVD, OMPI, PMI, KJAX, {**HVD, **OMPI}, {"HOROVOD_RANK": "1"}, {}):
        launch = launch_from_env(env)
        assert rank_and_size(env) == (launch.rank, launch.size)
    for name, value in OMPI.items():
        monkeypatch.setenv(name, value)
    assert resolve_shards(None, None) == (4, 3)


def test_get_distribution_asks_the_launcher(monkeypatch):
    from cvbench.training import distributed

    made = []
    monkeypatch.setattr(distributed, "Horovod", lambda: made.append("horovod") or "hvd")
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMI_RANK", "0")  # mpirun: Horovod, on either backend
    assert distributed.get_distribution("auto") == "hvd" and made == ["horovod"]
    assert distributed.launched_by_horovod()
    monkeypatch.delenv("PMI_RANK")
    assert not distributed.launched_by_horovod()


def test_the_jax_count_is_named_where_jax_processes_start(monkeypatch):
    import keras

    from cvbench.training import distributed
    from cvbench.training.jax_distributed import launched_for_jax

    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match="^KERAS_DISTRIBUTION_NUM_PROCESSES must be an integer"):
        launched_for_jax()
    if keras.config.backend() == "jax":
        with pytest.raises(ValueError, match="^KERAS_DISTRIBUTION_NUM_PROCESSES must be an int"):
            distributed.get_distribution("auto")
    else:  # the JAX variables are not TensorFlow's: one process
        assert isinstance(distributed.get_distribution("auto"), distributed.SingleProcess)
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    assert not launched_for_jax()


def test_the_command_waits_for_no_coordinator_in_one_process(monkeypatch):
    # --coordinator-timeout with one JAX process: "auto", nothing to wait for; a count that
    # is not a number is named
    import argparse

    import keras

    from cvbench.cli.backend_args import distribution_from_args
    from cvbench.cli.errors import CLIError

    args = argparse.Namespace(coordinator_timeout=5)
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    if keras.config.backend() != "jax":
        with pytest.raises(CLIError, match="^--coordinator-timeout is for the JAX backend"):
            distribution_from_args(args)
        return
    assert distribution_from_args(args) == "auto"
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match="^KERAS_DISTRIBUTION_NUM_PROCESSES must be an integer"):
        distribution_from_args(args)


def test_the_old_import_paths_keep_working():
    # the base classes moved below Horovod and JaxDataParallel: the same objects as before
    from cvbench import training
    from cvbench.training import distributed, distribution_base, jax_distributed
    from cvbench.utils import launch

    for name in ("Distribution", "SingleProcess", "RankFailedError"):
        assert getattr(distributed, name) is getattr(distribution_base, name)
    assert training.Distribution is distribution_base.Distribution
    assert issubclass(jax_distributed.JaxDataParallel, distribution_base.Distribution)
    assert issubclass(distributed.Horovod, distribution_base.Distribution)
    assert (
        jax_distributed.ENV_VARS
        == launch.JAX_VARS
        == (
            "KERAS_DISTRIBUTION_JOB_ADDRESSES",
            "KERAS_DISTRIBUTION_NUM_PROCESSES",
            "KERAS_DISTRIBUTION_PROCESS_ID",
        )
    )
