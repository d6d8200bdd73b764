"""Building: raw images and annotations -> sharded TFRecords, `dataset_info.json` and the
DALI index files beside them (the parallel, resumable shard writer and its worker pool).
Imports the shared modules of `cvbench.data` only, never `read` or `acquire`."""
