"""The hostile-input harness of issue #37: every `cvbench` command and public reader that
takes a path, run against crafted inputs (`corpus.py`: FIFOs, a `/dev/zero` link, a 2 GiB
sparse JPEG, `'[' * 100000`, archive bombs, lying image headers, a 13000 x 13000 PNG,
outputs that are links or inputs, glob characters, newlines and non-UTF-8 bytes in names).

- `commands.py`: the table (`TABLE`, one `Row` per path argument; `SEEDS`, the issue's
  repros A-K) and the documented outcome of each case; how to add a command is there.
- `harness.py`: the fork server that runs each command line in a child of a process that
  imported cvbench and TensorFlow once, measuring its exit status, peak memory and time.
- `test_hostile.py`: one test per case (exit status, one error line naming the file, no
  traceback, at most 1.5 GiB over the baseline, no hang past 60 s, nothing outside the
  outputs changed); `test_harness.py`: the harness's own checks.

Run it with `python -m pytest tests/hostile` (about 3-4 minutes on two cores: the server
starts in 5 s, the assets take 20 s, most cases a fraction of a second, the ones that train
or load a model a few seconds). `CVBENCH_HOSTILE_TIMEOUT=S` lowers every case's timeout (a
quicker look at code that still hangs); `PYTHONPATH=<another checkout>` runs the commands of
that checkout's `cvbench` (the server says which it imported), e.g. the code before a fix.
"""
