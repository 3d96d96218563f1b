"""Local paths and ``s3://`` URIs behind one small interface (fsspec; s3fs for S3).

S3 endpoints and credentials come from the standard AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), so the same code talks to AWS, Ceph radosgw or
any other S3-compatible server. Credentials are never logged.
"""
from __future__ import annotations

import io
import os
import posixpath
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq


def is_remote(uri: str) -> bool:
    return "://" in str(uri) and not str(uri).startswith("file://")


def fs_and_path(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem serving ``uri`` and the path within it."""
    uri = str(uri)
    if uri.startswith("s3://"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        fs = fsspec.filesystem("s3", client_kwargs={"endpoint_url": endpoint} if endpoint else {})
        return fs, uri[len("s3://"):]
    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path


def join(uri: str, *parts: str) -> str:
    return posixpath.join(str(uri), *parts) if is_remote(uri) else os.path.join(uri, *parts)


def exists(uri: str) -> bool:
    fs, path = fs_and_path(uri)
    return fs.exists(path)


def listdir(uri: str, suffix: str = "") -> list[str]:
    """Full URIs of the files directly under ``uri`` ending in ``suffix`` (empty if missing)."""
    fs, path = fs_and_path(uri)
    try:
        names = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    prefix = "s3://" if str(uri).startswith("s3://") else ""
    return sorted(prefix + n for n in names if n.endswith(suffix))


def read_bytes(uri: str) -> bytes:
    fs, path = fs_and_path(uri)
    with fs.open(path, "rb") as f:
        return f.read()


def write_bytes(uri: str, data: bytes) -> None:
    """Write atomically: readers see the old file or the whole new one, never a part."""
    fs, path = fs_and_path(uri)
    if is_remote(uri):  # an object PUT is atomic already
        with fs.open(path, "wb") as f:
            f.write(data)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_table(table: pa.Table, uri: str) -> None:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    write_bytes(uri, buf.getvalue())


def read_table(uri: str, columns: list[str] | None = None) -> pa.Table:
    fs, path = fs_and_path(uri)
    with fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns)
