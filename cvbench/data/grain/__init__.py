"""The grain input path: ImageNet-format TFRecords -> NumPy batches without TensorFlow.

Modules, one concept each:
    records.py   random access into TFRecord shards (`TFRecordSource`, a grain
                 `RandomAccessDataSource`) and `tf.train.Example` parsing (`parse_example`).
    augment.py   the classification recipe (`ImagePreprocessing`) in NumPy: JPEG decoding
                 (simplejpeg, Pillow for the rest), the training crop and flip, the evaluation
                 resize and crop, input scaling.
    dataset.py   `imagenet_grain_dataset`: the grain pipeline (deterministic order, process
                 shards, padded evaluation, an iterator whose state can be saved).

Nothing here imports TensorFlow; `grain` itself is imported by `dataset.py` (the `jax` extra:
`pip install "cvbench[jax]"`).
"""
