"""What rank 0 reports: printed lines, a JSON-lines log, TensorBoard scalars, a progress bar.

The bar is `tqdm.auto`'s (a notebook widget in Jupyter where ipywidgets is installed); by
default ("auto") it runs on a terminal and in a Jupyter kernel, not when stderr is a file or
a pipe, where the step lines are the progress (`cvbench.utils.progress.progress_style`).

`RunLog` is created on every rank; on the others (`enabled=False`) every method does nothing,
so the Trainer calls it unconditionally. TensorBoard uses `tf.summary` and is written only on
the TensorFlow backend (other backends get a one-time note instead); it needs only
TensorFlow, not the tensorboard package (which is needed to view the events).

`train_log.jsonl` is appended to one whole line at a time. A run killed in the middle of a
line leaves a last line without its newline; the next run into the folder (a resume) drops
that partial line before appending and records a `partial_line_dropped` event with its
bytes, so that every line parses again (`read_run_log` skips such a line too). A write that
fails (a full disk) raises an `OSError` naming the log file. The log is never cut or appended
to through a symbolic link (`cvbench.utils.files.open_output`), and `tensorboard/` is never a
link (`owned_folder`): either is refused with a `BadFileError` naming it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import keras

from cvbench.training.run_dir import RunFolder
from cvbench.utils.errors import naming
from cvbench.utils.files import open_output, owned_folder
from cvbench.utils.io import json_text
from cvbench.utils.progress import progress_style


class RunLog:
    """Rank 0's outputs for one run.

    Args:
        log_dir: directory for `train_log.jsonl` and `tensorboard/`; None: print only.
        enabled: False on ranks other than 0.
        progress_bar: True, False or "auto" (when stderr is a terminal or in a Jupyter
            kernel, see `wants_bar`).
        tensorboard: write TensorBoard scalars under `log_dir/tensorboard/`; False for a log
            that only records events (no events file is opened).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike | None,
        *,
        enabled: bool,
        progress_bar: bool | str,
        tensorboard: bool = True,
    ) -> None:
        self.enabled = enabled
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._want_bar = wants_bar(progress_bar) and enabled
        self._bar = None
        self._jsonl = None
        self._writer = None
        self._path: Path | None = None
        if enabled and self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._path = RunFolder(self.log_dir).log
            count, head = drop_partial_line(self._path)
            self._jsonl = open_output(self._path, "ab", buffering=0)
            if count:
                text = head.decode("utf-8", "replace")
                self.record("partial_line_dropped", bytes=count, text=text)
            if tensorboard:
                board = owned_folder(self.log_dir, RunFolder.TENSORBOARD, create=False)  # no link
                self._writer = _summary_writer(board)

    def print(self, line: str) -> None:
        """Prints `line` on rank 0 (above the progress bar when there is one)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def record(self, event: str, **fields: Any) -> None:
        """Appends `{"event": event, "time": ..., **fields}` to the JSON-lines log."""
        if self._jsonl is None:
            return
        entry = {"event": event, "time": round(time.time(), 3)}
        entry.update(fields)  # a non-finite value as null: `json_text`'s one rule
        line = memoryview((json_text(entry, sort_keys=True) + "\n").encode("utf-8"))
        with naming(self._path, replace=True):
            while line:  # unbuffered: a short write (a disk filling up) writes the rest
                line = line[self._jsonl.write(line) :]

    def scalars(self, step: int, values: dict[str, float], prefix: str = "") -> None:
        """Writes TensorBoard scalars at `step` (non-finite values included as they are)."""
        if self._writer is None:
            return
        import tensorflow as tf

        with self._writer.as_default():
            for name, value in values.items():
                if value is not None:
                    tf.summary.write(
                        prefix + name,
                        tf.constant(float(value), tf.float32),
                        step=step,
                        metadata=_SCALAR_METADATA,
                    )
        self._writer.flush()

    def start_bar(self, total: int, initial: int, description: str) -> None:
        """Starts a progress bar over `total` steps (rank 0, when enabled)."""
        self.close_bar()
        if not self._want_bar:
            return
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, initial=initial, desc=description, dynamic_ncols=True)

    def advance_bar(self, postfix: dict[str, float] | None = None) -> None:
        """Moves the progress bar one step."""
        if self._bar is None:
            return
        if postfix:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)
        self._bar.update(1)

    def close_bar(self) -> None:
        """Closes the progress bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """Closes the bar and files."""
        self.close_bar()
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def drop_partial_line(path: str | os.PathLike, *, keep_text: int = 1000) -> tuple[int, bytes]:
    """Cuts a last line without its newline (a writer killed mid-line) off the file at
    `path`.

    Returns:
        `(bytes cut, their first keep_text bytes)`: `(0, b"")` when the file ends with a
        newline, is empty or does not exist.

    Raises:
        BadFileError: `path` is a symbolic link (never followed) or not a regular file.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "train_log.jsonl"
        >>> _ = path.write_bytes(b'{"event": "start"}\\n{"event": "st')
        >>> drop_partial_line(path), path.read_bytes()
        ((13, b'{"event": "st'), b'{"event": "start"}\\n')
    """
    if not os.path.lexists(path):
        return 0, b""
    with open_output(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        keep = end
        while keep > 0:  # back to the last newline, a chunk at a time
            start = max(keep - _CHUNK, 0)
            f.seek(start)
            newline = f.read(keep - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            keep = start
        if keep == end:
            return 0, b""
        f.seek(keep)
        head = f.read(min(end - keep, keep_text))
        f.truncate(keep)
    return end - keep, head


def read_run_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The events of a `train_log.jsonl`, oldest first; a last line without its newline (a
    run killed mid-write, not yet resumed) is left out.

    Raises:
        BadFileError: a complete line that is not a JSON object, naming the file and line.
    """
    from cvbench.utils.errors import BadFileError

    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")[:-1]  # the part after the last newline is incomplete
    events = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            raise BadFileError(f"{path}: line {number} is not JSON ({e})") from None
        if not isinstance(event, dict):
            raise BadFileError(f"{path}: line {number} is not a JSON object")
        events.append(event)
    return events


def read_run_history(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The events of a `train_log.jsonl` as the run's history: each `step` and `epoch`
    record once, as an uninterrupted run would have made them.

    A run killed after its last checkpoint leaves records of steps (and epochs) that its
    resume makes again: a resume's `start` event names the step and the epochs done it
    resumed from (`resumed_step`, `resumed_epoch`), and the earlier records of a later step,
    or of an epoch not done then, are left out. Other events are all kept.

    Example:
        >>> events = [{"event": "step", "step": 1}, {"event": "step", "step": 2},
        ...           {"event": "start", "resumed_step": 1, "resumed_epoch": 0},
        ...           {"event": "step", "step": 2}]
        >>> [e.get("step") for e in superseded_records_dropped(events)]
        [1, None, 2]
    """
    return superseded_records_dropped(read_run_log(path))


def superseded_records_dropped(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events` (a run log's, oldest first) without the `step` and `epoch` records a resume
    made again (`read_run_history`). Steps are compared in images: a resume on another
    number of ranks (another global batch) counts its steps in its own global batch, which
    each `start` event records (`global_batch`; a log without it compares steps as they are).

    Example:
        >>> events = [{"event": "start", "global_batch": 4},
        ...           *({"event": "step", "step": s} for s in (1, 2, 3, 4)),
        ...           {"event": "start", "global_batch": 8, "resumed_step": 1,
        ...            "resumed_epoch": 0},  # 8 images in: the first session's step 2
        ...           {"event": "step", "step": 2}]
        >>> [e.get("step") for e in superseded_records_dropped(events)]
        [None, 1, 2, None, 2]
    """
    history: list[tuple[dict[str, Any], Any]] = []  # (event, the global batch of its steps)
    batch = None
    for event in events:
        if event.get("event") == "start":
            step, epoch = event.get("resumed_step"), event.get("resumed_epoch")
            batch = event.get("global_batch")
            history = [(e, b) for e, b in history if not _made_again(e, b, step, batch, epoch)]
        history.append((event, batch))
    return [event for event, _ in history]


def _made_again(event: dict[str, Any], batch: Any, step: Any, now: Any, epoch: Any) -> bool:
    """Whether the `step` / `epoch` record `event` (of steps of global batch `batch`) lies
    after a resume from `step` (of global batch `now`) with `epoch` epochs done (None: not
    recorded, a fresh run or an older log)."""
    kind = event.get("event")
    if kind not in ("step", "epoch") or not isinstance(step, int):
        return False
    if isinstance(event.get("step"), int):
        sizes = (batch, now)
        known = all(isinstance(b, int) and b > 0 for b in sizes)
        if (event["step"] * batch > step * now) if known else event["step"] > step:
            return True
    done = kind == "epoch" and isinstance(epoch, int) and isinstance(event.get("epoch"), int)
    return done and event["epoch"] > epoch


def wants_bar(progress_bar: bool | str, stream: Any = None) -> bool:
    """Whether to show the bar: `progress_bar` itself, or for "auto" whether `stream`
    (default `sys.stderr`) is a terminal or this is a Jupyter kernel.

    Raises:
        ValueError: for a value other than True, False and "auto".
    """
    if progress_bar == "auto":
        return progress_style(stream) != "lines"
    if progress_bar not in (True, False):  # TrainConfig's check: 1 and 0 pass as well
        raise ValueError(f"progress_bar must be True, False or 'auto', got {progress_bar!r}")
    return bool(progress_bar)


_SCALAR_METADATA = None
#: The run log's file name, in the log dir.
LOG_NAME = RunFolder.LOG
#: The read size of `drop_partial_line` looking for the last newline.
_CHUNK = 65536


def _summary_writer(directory: Path):
    if keras.config.backend() != "tensorflow":
        print(
            f"cvbench: TensorBoard scalars need the TensorFlow backend "
            f"(backend is {keras.config.backend()}); writing the JSON-lines log only",
            file=sys.stderr,
        )
        return None
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    # What TensorBoard's own `tf.summary.scalar` writes, without needing the tensorboard
    # package installed: a float32 tensor tagged for the "scalars" plugin.
    global _SCALAR_METADATA
    _SCALAR_METADATA = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    ).SerializeToString()
    return tf.summary.create_file_writer(str(directory))
