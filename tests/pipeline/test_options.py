"""Option parsing and the source schema, without Spark running."""

from __future__ import annotations

import os

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline.options import EARLIEST, LATEST, CommitLogOptionError, SourceOptions
from pipeline.schema import ARROW_SCHEMA, COLUMN_NAMES, spark_schema


def test_arrow_schema_is_what_spark_expects_from_read() -> None:
    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)
    assert tuple(spark_schema().fieldNames()) == COLUMN_NAMES


def test_defaults_and_relative_path_made_absolute(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    opts = SourceOptions.parse({"path": "store"})
    assert opts.store_dir == os.path.join(os.fspath(tmp_path), "store")
    assert (opts.starting_offsets, opts.ending_offsets) == (EARLIEST, LATEST)
    assert opts.include_body and opts.verify_crc and opts.fail_on_data_loss
    assert opts.topics is None and opts.max_bytes_per_trigger is None


def test_values_parsed_case_insensitively() -> None:
    opts = SourceOptions.parse(
        {
            "path": "/s",
            "STARTINGOFFSETS": "4096",
            "endingoffsets": "8192",
            "topics": " a, b ,,a",
            "includeBody": "FALSE",
            "verifyCrc": "true",
            "failOnCrcError": "true",
            "splitBytes": "1000",
            "maxBytesPerTrigger": "65536",
            "failOnDataLoss": "false",
        }
    )
    assert (opts.starting_offsets, opts.ending_offsets) == (4096, 8192)
    assert opts.topics == frozenset({"a", "b"})
    assert not opts.include_body and opts.fail_on_crc_error and not opts.fail_on_data_loss
    assert (opts.split_bytes, opts.max_bytes_per_trigger) == (1000, 65536)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"path": "/s", "startingOffset": "0"}, "startingOffset"),
        ({"path": "/s", "startingOffsets": "newest"}, "startingOffsets"),
        ({"path": "/s", "startingOffsets": "-1"}, "startingOffsets"),
        ({"path": "/s", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"path": "/s", "startingOffsets": "10", "endingOffsets": "5"}, "endingOffsets"),
        ({"path": "/s", "includeBody": "yes"}, "includeBody"),
        ({"path": "/s", "splitBytes": "0"}, "splitBytes"),
        ({"path": "/s", "maxBytesPerTrigger": "1k"}, "maxBytesPerTrigger"),
        ({"path": "/s", "topics": " , "}, "topics"),
        ({"path": "/s", "verifyCrc": "false", "failOnCrcError": "true"}, "failOnCrcError"),
        ({}, "path"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(CommitLogOptionError) as caught:
        SourceOptions.parse(options)
    assert caught.value.option == named
    assert repr(named) in str(caught.value)
