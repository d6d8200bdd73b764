"""Reading: TFRecords (or tfds, or synthetic arrays) -> training and evaluation batches.
Each reader takes one frozen `ReadSpec` (`spec.py`), lists and splits the files
(`reader.py`), parses and augments its examples and batches them (`pipeline.py`,
`corrupt.py`). Imports the shared modules of `cvbench.data` only, never `builders` or
`acquire`."""
