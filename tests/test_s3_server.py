"""Smoke test for the local radosgw S3 server (scripts/s3_server.sh).

Run with:  bash scripts/s3_server.sh start
           eval "$(bash scripts/s3_server.sh env)"; pytest -q -m s3 tests/test_s3_server.py
"""

import os
import uuid

import pytest

pytestmark = [
    pytest.mark.s3,
    pytest.mark.skipif(
        not os.environ.get("AWS_ENDPOINT_URL"),
        reason="AWS_ENDPOINT_URL unset: start scripts/s3_server.sh and eval its `env` output",
    ),
]


@pytest.fixture
def prefix():
    # One level below the bucket: pyarrow re-creates the parent "dir/" marker
    # when deleting, and the bucket itself is the only parent we don't mind.
    return f"{os.environ.get('TRAPPM_S3_BUCKET', 'trappm')}/test-s3-server-{uuid.uuid4().hex}"


def test_s3fs_roundtrip(prefix):
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    path = f"{prefix}/hello.txt"
    fs.pipe(path, b"hello radosgw")
    try:
        assert fs.cat(path) == b"hello radosgw"
    finally:
        fs.rm(path)
    assert not fs.exists(path)


def test_pyarrow_parquet_roundtrip(prefix):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = pafs.S3FileSystem(
        endpoint_override=os.environ["AWS_ENDPOINT_URL"],
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    )
    path = f"{prefix}/table.parquet"
    table = pa.table({"x": [1, 2, 3], "name": ["a", "b", "c"]})
    pq.write_table(table, path, filesystem=fs)
    try:
        assert pq.read_table(path, filesystem=fs).equals(table)
    finally:
        fs.delete_dir(prefix)
    assert fs.get_file_info(prefix).type == pafs.FileType.NotFound
