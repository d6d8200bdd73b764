"""The hostile-input harness (issue #37): every command and public reader of `TABLE` and
every seed of `SEEDS` (tests/hostile/commands.py) against its crafted input, through the
fork server (tests/hostile/harness.py). For each case:

- the exit status is the documented one (`Expect.rc`);
- for a refusal, stderr holds ONE error line `cvbench[ COMMAND]: error: ...` naming the file
  (its name or path, with a newline or non-UTF-8 byte escaped or not), besides the lines a
  command prints before it starts (the recipe's overrides, Python warnings); never a
  `Traceback`;
- the command allocates at most `BUDGET_BYTES` (1.5 GiB) over a process that imported
  cvbench and TensorFlow (the child's `ru_maxrss` against a `cvbench --version` child's);
- it ends within the case's timeout (60 s);
- every file of the case folder outside the command's outputs (the inputs, the hostile file
  itself, `victim.txt`) and every protected file inside them is byte-identical afterwards.

The peak memory of each case is printed (`-s` shows it, `-rA` too): `hostile: <case> rc=R
peak over baseline M MiB in S s`.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

import pytest

from cvbench.utils.files import OUTPUTS_LIST
from hostile.commands import Case, cases
from hostile.harness import BUDGET_BYTES

CASES = cases()
#: Lines a command may print on stderr before its error line: the recipe's overrides, the
#: run-folder notice, a warning per skipped file, Python warnings and the source line under
#: each.
_BEFORE_ERROR = re.compile(
    r"cvbench: overrides of |cvbench train: no --log-dir|cvbench [\w-]+: warning: "
    r"|\S.*:\d+: \w*Warning: |\s"
)
_ERROR_LINE = re.compile(r"cvbench( [\w-]+)?: error: ")


def tree(root: Path, skip: set[Path]) -> dict[str, str]:
    """Every entry under `root` but `skip` (and what lies below): file -> size and SHA-256
    (first and last MiB past 64 MiB: the sparse file), link -> target, FIFO, folder."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            if path in skip:
                if name in dirnames:
                    dirnames.remove(name)
                continue
            st = os.lstat(path)
            key = os.fsencode(path.relative_to(root)).decode("utf-8", "backslashreplace")
            if stat.S_ISLNK(st.st_mode):
                out[key] = "link " + os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                out[key] = "folder"
            elif stat.S_ISREG(st.st_mode):
                out[key] = f"{st.st_size} {_digest(path, st.st_size)}"
            else:
                out[key] = f"special {stat.S_IFMT(st.st_mode)}"
    return out


def _digest(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 64 << 20:
            digest.update(f.read())
        else:
            digest.update(f.read(1 << 20))
            f.seek(size - (1 << 20))
            digest.update(f.read())
    return digest.hexdigest()


def name_forms(name: str) -> set[str]:
    """How a message may write the file name `name`: as is, escaped like `repr`, newlines
    as `\\n`, undecodable bytes as `\\xNN`."""
    raw = os.fsencode(name)
    forms = {
        name,
        repr(name)[1:-1],
        name.replace("\n", "\\n"),
        raw.decode("utf-8", "backslashreplace"),
        raw.decode("utf-8", "replace"),
        repr(raw.decode("utf-8", "backslashreplace"))[1:-1],
    }
    return forms


def error_line(err: str) -> str:
    """The one error line of `err`, checked: nothing else but `_BEFORE_ERROR` lines before
    it, nothing after it."""
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if _ERROR_LINE.match(line)]
    assert len(errors) == 1, f"not one error line:\n{err[-3000:]}"
    assert errors[0] == len(lines) - 1, f"lines after the error line:\n{err[-3000:]}"
    others = [line for line in lines[:-1] if not _BEFORE_ERROR.match(line)]
    assert not others, f"lines besides the error line:\n{err[-3000:]}"
    return lines[-1]


def names(text: str, name: str) -> bool:
    return any(form in text for form in name_forms(name))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case: Case, server, assets, tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    paths = case.paths(folder, assets)
    argv = case.command_line(paths)
    outputs = {folder / o for o in case.outputs}
    # the list by which cvbench knows its own outputs (cvbench.utils.files.OUTPUTS_LIST),
    # kept in the folder of each output
    outputs |= {(folder / o).parent / OUTPUTS_LIST for o in case.outputs}
    protected = {p: _digest_or_none(folder / p) for p in case.protect}
    before = tree(folder, outputs)

    timeout = float(os.environ.get("CVBENCH_HOSTILE_TIMEOUT", case.timeout))
    result = server.run(argv, cwd=folder, timeout=timeout, call=case.call)

    mib = result.increment / (1 << 20)
    print(
        f"hostile: {case.id} rc={result.rc} peak over baseline {mib:.0f} MiB in "
        f"{result.wall_s:.1f} s"
    )
    context = f"{case.id}: {argv}\nstdout:\n{result.out[-1500:]}\nstderr:\n{result.err[-3000:]}"
    assert not result.timed_out, f"hung: killed after {timeout} s\n{context}"
    assert not result.memory_killed, f"killed past the memory budget\n{context}"
    assert result.increment <= BUDGET_BYTES, f"peak {mib:.0f} MiB over the baseline\n{context}"
    assert "Traceback" not in result.err, context
    assert result.rc in case.expect.codes, context
    target = paths.get(case.expect.named) if case.expect.named else None
    target_name = Path(target).name if target else None
    if result.rc != 0:
        line = error_line(result.err)
        if target_name:
            assert names(line, target_name), (
                f"the error line does not name {target_name!r}\n{context}"
            )
    elif case.expect.listed and target_name:
        assert names(result.out + result.err, target_name), f"{target_name!r} not listed\n{context}"
    if case.expect.check is not None:
        case.expect.check(result, folder)
    assert tree(folder, outputs) == before, f"files outside the outputs changed\n{context}"
    for path, digest in protected.items():
        assert _digest_or_none(folder / path) == digest, f"{path} changed\n{context}"


def _digest_or_none(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
