"""Reading: TFRecords (or tfds, or synthetic arrays) -> training and evaluation batches.
Each reader takes one frozen `ReadSpec` (`spec.py`) and plugs a source of parsed examples
(`reader.RecordExamples`: files and a parse function; `tfds.TfdsExamples`) and a transform
into one skeleton (`pipeline.read_batches`), which splits the records among ranks
(`ranks.py`), guards against corrupt input (`corrupt.py`) and batches them. Imports the
shared modules of `cvbench.data` only, never `builders` or `acquire`."""
