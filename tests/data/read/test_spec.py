"""`ReadSpec` and `read_spec`: the reading arguments every reader shares, checked once."""

from __future__ import annotations

import dataclasses

import pytest

from cvbench.data.read.spec import READ_FIELDS, ReadSpec, read_spec

pytestmark = pytest.mark.backend_agnostic


def test_fields_are_the_shared_reading_arguments():
    assert {
        "split",
        "batch_size",
        "training",
        "image_size",
        "num_shards",
        "shard_index",
        "dtype",
        "seed",
        "skip_corrupt",
        "corrupt_counter",
        "shuffle_buffer",
        "repeat",
        "max_pixels",
    } == READ_FIELDS


def test_frozen_and_keyword_only():
    spec = ReadSpec(split="train", batch_size=8, training=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.batch_size = 4
    with pytest.raises(TypeError):
        ReadSpec("train", 8, True)  # the fields are keyword-only


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive int, got 0"),
        ({"batch_size": 2.0}, "batch_size must be a positive int, got 2.0"),
        ({"batch_size": True}, "batch_size must be a positive int, got True"),
        ({"image_size": -1}, "image_size must be a positive int, got -1"),
        ({"shuffle_buffer": 0}, "shuffle_buffer must be a positive int, got 0"),
        ({"num_shards": 2}, "give both num_shards and shard_index"),
        ({"num_shards": 2, "shard_index": 2}, "shard_index=2"),
    ],
)
def test_a_bad_field_is_a_value_error_naming_it(fields, message):
    with pytest.raises(ValueError, match=message):
        ReadSpec(**{"batch_size": 8, "training": True, **fields})


def test_defaults_fill_only_unset_fields():
    spec = ReadSpec(batch_size=8, training=False, image_size=32)
    filled = spec.with_defaults(split="train", image_size=224, shuffle_buffer=10_000)
    assert (filled.split, filled.image_size, filled.shuffle_buffer) == ("train", 32, 10_000)
    assert spec.with_defaults(image_size=224, shuffle_buffer=None).image_size == 32


def test_read_spec_merges_keywords_into_a_spec():
    base = ReadSpec(split="train", batch_size=8, training=True, seed=1)
    assert read_spec(base) is base
    assert read_spec(base, split=None, seed=2) == dataclasses.replace(base, seed=2)
    assert read_spec(base, split="validation").split == "validation"
    assert read_spec(split="val", batch_size=2, training=False) == ReadSpec(
        split="val", batch_size=2, training=False
    )
    with pytest.raises(TypeError, match="cycle_lenght"):
        read_spec(base, cycle_lenght=3)
    with pytest.raises(ValueError, match="spec must be a ReadSpec"):
        read_spec({"batch_size": 8})


def test_a_reader_needs_a_split():
    with pytest.raises(ValueError, match="split must be given"):
        ReadSpec(batch_size=8, training=True).require_split()
    assert ReadSpec(split="val", batch_size=8, training=True).require_split() == "val"
