"""Progress output that suits where it goes: a bar on a terminal or in Jupyter, lines in logs.

A tqdm bar redraws itself with `\\r`, which a terminal shows as one moving line but a log
file, a CI job or `nohup` keeps as one ever longer line. `progress_style` tells the cases
apart: "notebook" in a Jupyter kernel (IPython's ZMQ shell, where `isatty()` is False but
the front end draws bars), "terminal" when the stream is a TTY, else "lines".
`progress_bar` returns a `tqdm.auto` bar (a notebook widget where ipywidgets is installed)
for the first two and a `LineProgress` for the last: plain lines every `every_seconds` or
every `every_fraction` of the total, whichever comes first, and one at the end, e.g.

    train: 1,200/5,000 img (24%), 310 img/s, eta 12s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

#: The IPython shell class of a Jupyter kernel (its subclasses too: Colab's, VS Code's).
_KERNEL_SHELL = "ZMQInteractiveShell"


def in_jupyter_kernel() -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell, already imported by the kernel)."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if callable(get_ipython) else None
    return shell is not None and any(c.__name__ == _KERNEL_SHELL for c in type(shell).__mro__)


def progress_style(stream: IO[str] | None = None) -> str:
    """Where progress goes: "notebook", "terminal" or "lines".

    Args:
        stream: the stream the progress is written to (default `sys.stderr`).

    Returns:
        "notebook" in a Jupyter kernel, "terminal" when `stream` is a TTY, else "lines".
    """
    if in_jupyter_kernel():
        return "notebook"
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return "terminal" if callable(isatty) and isatty() else "lines"
    except ValueError:  # a closed stream
        return "lines"


def progress_bar(
    *,
    total: int | None,
    desc: str | None = None,
    unit: str = "it",
    unit_scale: bool = False,
    unit_divisor: int = 1000,
    initial: int = 0,
    disable: bool = False,
    file: IO[str] | None = None,
    every_seconds: float = 60.0,
    every_fraction: float = 0.1,
) -> Any:
    """A tqdm bar on a terminal or in Jupyter, a `LineProgress` elsewhere (see the module).

    Both have tqdm's `update`, `set_description`, `set_postfix`, `write` and `close` and are
    context managers.

    Args:
        total: the count when done (None: unknown).
        desc: the name in front of the count.
        unit: what is counted ("img", "B"...).
        unit_scale: print counts with SI prefixes (1.2M), e.g. for bytes.
        unit_divisor: 1000 or 1024 for `unit_scale`.
        initial: the count already done (a resumed run).
        disable: print nothing.
        file: the stream (default `sys.stderr`).
        every_seconds: lines: at most this long between two lines.
        every_fraction: lines: also a line each time this fraction of `total` is done.

    Returns:
        A `tqdm.auto.tqdm` or a `LineProgress`.
    """
    file = sys.stderr if file is None else file
    if disable or progress_style(file) == "lines":
        return LineProgress(
            total=total,
            desc=desc,
            unit=unit,
            unit_scale=unit_scale,
            unit_divisor=unit_divisor,
            initial=initial,
            disable=disable,
            file=file,
            every_seconds=every_seconds,
            every_fraction=every_fraction,
        )
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        unit_divisor=unit_divisor,
        initial=initial,
        file=file,
        dynamic_ncols=True,
    )


class LineProgress:
    """Progress as plain lines, never `\\r`: tqdm's interface for logs and pipes.

    A line is printed when `every_seconds` have passed since the last one or another
    `every_fraction` of `total` is done, and once more by `close` (with the elapsed time
    instead of the ETA).

    Example:
        >>> import io
        >>> ticks = iter([0.0, 3.0, 4.0, 4.0])
        >>> out = io.StringIO()
        >>> p = LineProgress(total=5000, desc="train", unit="img", file=out,
        ...                  every_seconds=60.0, clock=lambda: next(ticks))
        >>> p.update(1200)  # 24% done: past 10%, a line (1200 img / 3 s = 400 img/s)
        >>> p.update(3800)  # done: the last line is close's
        >>> p.close()
        >>> print(out.getvalue(), end="")
        train: 1,200/5,000 img (24%), 400 img/s, eta 10s
        train: 5,000/5,000 img (100%), 1,250 img/s, in 4s

    Args:
        total, desc, unit, unit_scale, unit_divisor, initial, disable, file,
        every_seconds, every_fraction: as in `progress_bar`.
        clock: seconds (monotonic).

    Raises:
        ValueError: for a non-positive `every_seconds` or `every_fraction`.
    """

    def __init__(
        self,
        *,
        total: int | None,
        desc: str | None = None,
        unit: str = "it",
        unit_scale: bool = False,
        unit_divisor: int = 1000,
        initial: int = 0,
        disable: bool = False,
        file: IO[str] | None = None,
        every_seconds: float = 60.0,
        every_fraction: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not every_seconds > 0:
            raise ValueError(f"every_seconds must be > 0, got {every_seconds!r}")
        if not 0 < every_fraction <= 1:
            raise ValueError(f"every_fraction must be in (0, 1], got {every_fraction!r}")
        self.total, self.desc, self.unit = total, desc, unit
        self.unit_scale, self.unit_divisor = unit_scale, unit_divisor
        self.n = self._initial = initial
        self.disable = disable
        self.file = sys.stderr if file is None else file
        self.every_seconds, self.every_fraction = every_seconds, every_fraction
        self._clock = clock
        self._start = self._last = clock()
        self._last_step = self._step(initial)
        self._postfix = ""
        self._closed = False

    def update(self, n: int = 1) -> None:
        """Counts `n` more; prints a line when one is due."""
        if self.disable or self._closed:
            return
        self.n += n
        now = self._clock()
        step = self._step(self.n)
        if self.total and self.n >= self.total:
            return  # close prints the last line
        if now - self._last >= self.every_seconds or step > self._last_step:
            self._last, self._last_step = now, step
            self._print(self.line(now))

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        """The name in front of the next lines."""
        self.desc = desc

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kw) -> None:
        """`key=value` pairs after the next lines."""
        items = {**(ordered_dict or {}), **kw}
        self._postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def write(self, line: str, file: IO[str] | None = None) -> None:
        """Prints `line` (tqdm's `write`)."""
        print(line, file=self.file if file is None else file, flush=True)

    def close(self) -> None:
        """Prints the last line (once)."""
        if self.disable or self._closed:
            return
        self._closed = True
        self._print(self.line(self._clock(), final=True))

    def line(self, now: float, *, final: bool = False) -> str:
        """The progress line at time `now`."""
        elapsed = now - self._start
        done = self.n - self._initial
        parts = [self._count(self.n)]
        if self.total:
            parts[0] += f"/{self._count(self.total)}"
        parts[0] += f"{'' if self.unit_scale else ' '}{self.unit}"  # 2.00MB, 4 img
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        if elapsed > 0 and done > 0:
            rate = done / elapsed
            parts.append(
                f"{self._count(rate, rate=True)}{'' if self.unit_scale else ' '}{self.unit}/s"
            )
            if not final and self.total:
                parts.append(f"eta {_duration(max(self.total - self.n, 0) / rate)}")
        if final:
            parts.append(f"in {_duration(elapsed)}")
        if self._postfix:
            parts.append(self._postfix)
        head = f"{self.desc}: " if self.desc else ""
        return head + ", ".join(parts)

    def _step(self, n: int) -> int:
        if not self.total:
            return 0
        return int(n / self.total / self.every_fraction + 1e-9)

    def _count(self, value: float, *, rate: bool = False) -> str:
        if self.unit_scale:
            from tqdm import tqdm

            return tqdm.format_sizeof(value, divisor=self.unit_divisor)
        if rate and value < 100:
            return f"{value:.3g}"  # 0.0333, 2.5, 42.1
        return f"{value:,.0f}"

    def _print(self, line: str) -> None:
        print(line, file=self.file, flush=True)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(seconds: float) -> str:
    """`12s`, `3m05s`, `2h07m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
