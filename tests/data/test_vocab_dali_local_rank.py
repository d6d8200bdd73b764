"""The DALI pipeline's GPU is the launcher's local rank (`cvbench.utils.launch`), read from
the environment before Horovod starts: under horovodrun or mpirun each rank of a host reads
onto its own GPU, not every one onto GPU 0 (#38). No GPU or DALI needed: env dicts only."""

from __future__ import annotations

import sys
import types

import pytest

from cvbench.data.dali.pipeline import _local_rank


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        # horovodrun -np 4 -H host:4: the third rank of this host
        (
            {
                "HOROVOD_RANK": "2",
                "HOROVOD_SIZE": "4",
                "HOROVOD_LOCAL_RANK": "2",
                "HOROVOD_LOCAL_SIZE": "4",
            },
            2,
        ),  # fmt: skip
        # Open MPI's mpirun: rank 5 of 8 over 2 hosts of 4 is local rank 1
        (
            {
                "OMPI_COMM_WORLD_RANK": "5",
                "OMPI_COMM_WORLD_SIZE": "8",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            },
            1,
        ),  # fmt: skip
        ({"PATH": "/bin"}, 0),  # one process
    ],
    ids=["horovodrun", "mpirun", "single"],
)
def test_local_rank_is_the_launchers(environ, expected, monkeypatch):
    monkeypatch.delitem(sys.modules, "horovod.tensorflow", raising=False)
    assert _local_rank(environ) == expected


def test_a_started_horovod_wins_over_the_variables(monkeypatch):
    # Horovod started by the Trainer knows the local rank best (the launcher's variables may
    # be absent, e.g. under a scheduler of its own): it wins, as everywhere current_launch is.
    hvd = types.SimpleNamespace(
        is_initialized=lambda: True,
        rank=lambda: 3,
        size=lambda: 4,
        local_rank=lambda: 3,
        local_size=lambda: 4,
    )
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", hvd)
    assert _local_rank({"PATH": "/bin"}) == 3
