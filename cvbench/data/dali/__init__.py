"""The NVIDIA DALI input path: the DALI pipeline (`pipeline.py`, the same recipe as
`cvbench.data.read.preprocessing`) and its batches (`dataset.py`). May import `read` and the
shared modules; DALI itself is imported only when a function needs it."""
