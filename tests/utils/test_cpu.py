"""The CPU's model name and flags (cvbench.utils.cpu), from cpuinfo files the tests write."""

import os

import pytest

from cvbench.training.precision import cpu_has_fast_bfloat16
from cvbench.utils.cpu import SPEED_FLAGS, cpu_flags, cpu_model, describe_cpu

TWO_CPUS = (
    "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 amx_bf16\n\n"
    "processor\t: 1\nmodel name\t: another\nflags\t\t: fpu\n"
)


@pytest.mark.backend_agnostic
def test_cpu_flags_and_model_read_the_first_cpu(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(TWO_CPUS)
    assert cpu_flags(info) == frozenset({"fpu", "avx2", "amx_bf16"})  # not cpu 1's "fpu"
    assert cpu_model(info) == "AMD EPYC 9R14"
    assert cpu_has_fast_bfloat16(cpu_flags(info))
    assert cpu_flags(tmp_path / "missing") == frozenset()
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert cpu_flags(tmp_path / "arm") == frozenset({"fp", "asimd", "bf16"})
    assert not cpu_has_fast_bfloat16(cpu_flags(tmp_path / "arm"))  # ARM bf16: not in BF16_CPU_FLAGS


@pytest.mark.backend_agnostic
def test_no_flags_line_gives_no_flags_and_no_model_name_the_platforms(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: a virtual CPU\n")
    assert cpu_flags(tmp_path / "cpuinfo") == frozenset()
    (tmp_path / "bare").write_text("processor\t: 0\n")
    assert cpu_model(tmp_path / "bare")  # platform.processor() or machine(): never empty


@pytest.mark.backend_agnostic
def test_describe_cpu_names_what_it_has_and_lacks():
    assert describe_cpu(model="M", flags=set(SPEED_FLAGS), cores=16) == (
        "M, 16 cores, flags: " + " ".join(SPEED_FLAGS)
    )
    assert describe_cpu(model="M", flags={"sse2"}, cores=1) == (
        "M, 1 core, flags: none of " + ", ".join(SPEED_FLAGS)
    )
    assert describe_cpu(model="M", flags={"avx512_bf16"}, cores=2) == (
        "M, 2 cores, flags: avx512_bf16 (no avx2, avx512f, avx512_vnni, avx512_fp16, amx_bf16)"
    )
    # this machine: its own affinity and flags
    line = describe_cpu()
    assert f", {len(os.sched_getaffinity(0))} cores, flags: " in line
    assert line.startswith(cpu_model())
