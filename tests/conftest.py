"""Shared fixtures: one local Ray cluster per session, the real S3 server's settings."""
import os
import uuid

import pytest

# Before any test module imports ray: keeps local clusters on 127.0.0.1 (see ray_init.py).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_session():
    """A local 2-CPU Ray cluster on 127.0.0.1, shared by every test that needs Ray."""
    from trappm_ray.ray_init import ensure_ray

    ensure_ray(num_cpus=2)
    import ray

    yield ray
    ray.shutdown()


@pytest.fixture
def s3_prefix():
    """A fresh ``s3://`` prefix on the radosgw server that scripts/test.sh starts.

    Outside CI a missing server skips the test; in CI it is an error, so an S3 test can never
    pass by being skipped.
    """
    if not os.environ.get("AWS_ENDPOINT_URL"):
        if os.environ.get("CI"):
            pytest.fail("AWS_ENDPOINT_URL unset in CI: scripts/test.sh must start the S3 server")
        pytest.skip("no S3 server: run through scripts/test.sh (or start scripts/s3_server.sh)")
    bucket = os.environ.get("TRAPPM_S3_BUCKET", "trappm")
    prefix = f"s3://{bucket}/test-{uuid.uuid4().hex[:10]}"
    yield prefix
    from trappm_ray import storage

    fs, path = storage.fs_and_path(prefix)
    if fs.exists(path):
        fs.rm(path, recursive=True)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """Two tiny timm models at 32 px, batch sizes 1 and 2: four graph rows."""
    from trappm_ray.corpus import build as dataset

    out = str(tmp_path_factory.mktemp("corpus"))
    for arch in ("test_resnet", "test_vit"):
        assert dataset.build_shard(arch, 32, (1, 2), out)["status"] == "ok"
    return out
