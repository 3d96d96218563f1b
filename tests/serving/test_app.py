"""The Serve app over real HTTP on 127.0.0.1: good models, bad input, auth, cache, batching."""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

import onnx_builders as B
from ports import free_ports
from predictor_builders import random_predictor

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "serve_configs" / "predict.yaml"
TOKEN = "test-token-not-a-secret"
LIMIT_MB = 0.25
OCTET = {"Content-Type": "application/octet-stream"}
BUCKET = os.environ.get("TRAPPM_S3_BUCKET", "trappm")  # as the s3_prefix fixture


def free_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    random_predictor().save(str(root / "predictor"))
    models = root / "models"
    models.mkdir()
    (models / "cnn.onnx").write_bytes(B.to_bytes(B.cnn_model()))
    (root / "outside.onnx").write_bytes(B.to_bytes(B.cnn_model()))
    return root


@pytest.fixture(scope="module")
def server(ray_session, dirs):
    """One app (token required) on a free port; yields an httpx client with the token set."""
    from ray import serve

    from trappm_ray.serving.app import ServeSettings, TrappmPredictor

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = ServeSettings.from_args({
        "predictor": str(dirs / "predictor"), "allowed_roots": [str(dirs / "models")],
        "allowed_s3_prefixes": ["s3://allowed/prefix", f"s3://{BUCKET}/"], "max_body_mb": LIMIT_MB,
        "max_upload_mb": LIMIT_MB, "token_env": "TRAPPM_TEST_TOKEN", "max_batch_size": 4, "batch_wait_timeout_s": 0.05})
    app = TrappmPredictor.options(
        autoscaling_config={"min_replicas": 1, "max_replicas": 1},
        ray_actor_options={"num_cpus": 0.5,
                           "runtime_env": {"env_vars": {"TRAPPM_TEST_TOKEN": TOKEN}}},
    ).bind(asdict(settings))
    serve.run(app, name="trappm-test", route_prefix="/")
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=120,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client
    serve.shutdown()


def assert_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["error"]["code"] == code, body
    assert "\n" not in body["error"]["message"] and "Traceback" not in r.text


def test_healthz_and_models(server):
    r = server.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = server.get("/v1/models")
    assert r.status_code == 200, r.text
    models = r.json()["models"]
    assert models[0]["model_version"].startswith("random@")
    assert models[0]["device"]["slug"] == "test-device" and models[0]["targets"]
    by_device = {d["device"]: d for d in r.json()["devices"]}
    assert by_device["rtx3090-amp"]["predictor"] == "rtx3090-amp"
    assert by_device["h100-sxm5-80gb"]["predictor"] == "gpu-spec" and by_device["h100-sxm5-80gb"]["spec_only"]


def test_predict_device_query(server):
    """``?device=`` picks a device's predictor: a spec-table GPU without labels gets gpu-spec."""
    body = B.to_bytes(B.cnn_model())
    # batch 6: a batch no other test posts, so the cache of the other tests stays as they expect
    r = server.post("/v1/predict?batch_size=6&device=h100-sxm5-80gb", content=body, headers=OCTET)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["device"]["slug"] == "h100-sxm5-80gb" and d["model_version"].startswith("gpu-spec:")
    assert d["train_step_ms"] >= d["floors"]["train_step_ms"] and d["train_memory_mb"] > 0
    assert any("device specs alone" in n for n in d["notes"])
    plain = server.post("/v1/predict?batch_size=6", content=body, headers=OCTET).json()
    assert plain["device"]["slug"] == "test-device"  # the cache keys on the device too
    assert_error(server.post("/v1/predict?device=nope", content=body, headers=OCTET), 400,
                 "unsupported_option")


def test_predict_upload_and_cache(server):
    body = B.to_bytes(B.cnn_model())
    r = server.post("/v1/predict?batch_size=4", content=body, headers=OCTET)
    assert r.status_code == 200, r.text
    d = r.json()
    assert {"train_step_ms", "train_memory_mb", "inference_ms", "interval", "model_version"} <= d.keys()
    assert d["batch_size"] == 4 and d["cached"] is False and d["model"] == "<upload>"
    again = server.post("/v1/predict?batch_size=4", content=body, headers=OCTET).json()
    assert again["cached"] is True and again["train_step_ms"] == d["train_step_ms"]
    files = {"file": ("named.onnx", body, "application/octet-stream")}
    named = server.post("/v1/predict", files=files, data={"batch_size": "4"}).json()
    assert named["cached"] is True and named["model"] == "<upload>"
    other = server.post("/v1/predict?batch_size=8", content=body, headers=OCTET).json()
    assert other["cached"] is False and other["batch_size"] == 8


def test_predict_multipart_dims_and_benign_external(server):
    files = {"file": ("block.onnx", B.to_bytes(B.transformer_block("seq")), "application/octet-stream")}
    r = server.post("/v1/predict", files=files, data={"batch_size": "2", "dims": "seq:16"})
    assert r.status_code == 200, r.text
    assert r.json()["graph"]["macs"] == B.transformer_expect(2, 16)["total_macs"]
    # external data inside the model's folder: never read, only shapes are used
    r = server.post("/v1/predict", content=B.to_bytes(B.external_data_model("weights.bin")),
                    headers=OCTET)
    assert r.status_code == 200, r.text


def test_a_transformers_config_and_its_layout_as_json(server):
    """The layout call of the Python API over HTTP: a GPT config object, tp x pp x dp on 8 GPUs."""
    pytest.importorskip("transformers")
    gpt = {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "n_positions": 128, "vocab_size": 1000}
    body = {"config": gpt, "batch_size": 2, "device": "a100", "gpus": 8, "parallel": "tp=2,pp=2,dp=2",
            "global_batch": 16, "recompute": True, "cluster": {"gpus_per_node": 4, "intra_node_gbs": 150,
                                                               "inter_node_gbps": 100}}
    r = server.post("/v1/predict", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["model_version"] == "physics:parallel" and not d["cached"]
    assert d["distributed"]["parallel"] == "tp=2,pp=2,dp=2" and d["distributed"]["nodes"] == 2
    assert server.post("/v1/predict", json=body).json()["cached"]
    assert_error(server.post("/v1/predict", json={**body, "parallel": "tp=3"}), 400, "bad_options")
    assert_error(server.post("/v1/predict", json={**body, "gpus": "many"}), 400, "bad_options")
    assert_error(server.post("/v1/predict", json={**body, "config": {"n_embd": 64}}), 400, "not_a_model")
    # some fields change the GPU's own cluster (--gpus-per-node): a DGX A100 in servers of two
    two = server.post("/v1/predict", json={**body, "cluster": {"gpus_per_node": 2}}).json()
    assert two["distributed"]["nodes"] == 4 and two["distributed"]["cluster"] == "dgx-a100, gpus_per_node 2"
    assert_error(server.post("/v1/predict", json={**body, "cluster": {"gpus": 2}}), 400, "bad_options")


def test_predict_json_uri(server, dirs):
    ok = server.post("/v1/predict", json={"uri": str(dirs / "models" / "cnn.onnx"), "batch_size": 2})
    assert ok.status_code == 200, ok.text
    assert ok.json()["model"].endswith("cnn.onnx")
    assert_error(server.post("/v1/predict", json={"uri": str(dirs / "outside.onnx")}), 403,
                 "uri_forbidden")
    assert_error(server.post("/v1/predict", json={"uri": str(dirs / "models" / ".." / "outside.onnx")}),
                 403, "uri_forbidden")
    assert_error(server.post("/v1/predict", json={"uri": "/etc/passwd"}), 403, "uri_forbidden")
    assert_error(server.post("/v1/predict", json={"uri": "s3://other/x.onnx"}), 403, "uri_forbidden")
    assert_error(server.post("/v1/predict", json={"uri": "http://example.com/x.onnx"}), 400, "bad_uri")
    assert_error(server.post("/v1/predict", json={"uri": str(dirs / "models" / "nope.onnx")}), 404,
                 "not_found")
    assert_error(server.post("/v1/predict", json={"path": "x"}), 400, "bad_json")
    assert_error(server.post("/v1/predict", content=b"{not json",
                             headers={"Content-Type": "application/json"}), 400, "bad_json")


@pytest.mark.s3
def test_predict_json_s3_uri(server, s3_prefix):
    from trappm_ray import storage

    storage.write_bytes(f"{s3_prefix}/cnn.onnx", B.to_bytes(B.cnn_model()))
    r = server.post("/v1/predict", json={"uri": f"{s3_prefix}/cnn.onnx", "batch_size": 2})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == f"{s3_prefix}/cnn.onnx" and r.json()["graph"]["nodes"] == 5
    assert_error(server.post("/v1/predict", json={"uri": f"{s3_prefix}/missing.onnx"}), 404,
                 "not_found")


def _chunks(n: int):
    for _ in range(n):
        yield b"\x00" * 65536


cnn = B.to_bytes(B.cnn_model())
BAD = [  # (id, body, headers, query, status, code)
    ("corrupt", cnn[: len(cnn) // 2], OCTET, "", 400, "corrupt_protobuf"),
    ("random", np.random.default_rng(0).bytes(4096), OCTET, "", None, None),
    ("empty", b"", OCTET, "", 400, "corrupt_protobuf"),
    ("oversized", b"\x00" * int(LIMIT_MB * 2**20 + 1), OCTET, "", 413, "too_large"),
    ("external_escape", B.to_bytes(B.external_data_model("../../etc/passwd")), OCTET, "", 422,
     "external_data"),
    ("control_flow", B.to_bytes(B.if_model()), OCTET, "", 422, "unsupported"),
    ("wrong_type", cnn, {"Content-Type": "text/plain"}, "", 415, "unsupported_media_type"),
    ("no_type", cnn, {"Content-Type": ""}, "", 415, "unsupported_media_type"),
    ("batch_zero", cnn, OCTET, "?batch_size=0", 400, "bad_options"),
    ("batch_text", cnn, OCTET, "?batch_size=abc", 400, "bad_options"),
    ("recompute_word", cnn, OCTET, "?recompute=maybe", 400, "bad_options"),
    ("recompute_on_cpu", cnn, OCTET, "?recompute=true", 400, "unsupported_option"),
    ("multipart_no_file", None, None, "", 400, "no_file"),
]


@pytest.mark.parametrize("body,headers,query,status,code", [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_input_is_4xx_json(server, body, headers, query, status, code):
    if body is None:
        r = server.post("/v1/predict",
                        headers={"Content-Type": "multipart/form-data; boundary=xyz"},
                        content=b"--xyz\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--xyz--\r\n")
    else:
        r = server.post(f"/v1/predict{query}", content=body, headers=headers)
    if status is None:  # random bytes: any 4xx with a JSON error
        assert 400 <= r.status_code < 500 and r.json()["error"]["code"]
    else:
        assert_error(r, status, code)


def test_chunked_oversized_body(server):
    r = server.post("/v1/predict", content=_chunks(8), headers=OCTET)  # no Content-Length
    assert_error(r, 413, "too_large")


def test_auth(server):
    base = str(server.base_url)
    with httpx.Client(base_url=base, timeout=60) as anon:
        assert anon.get("/healthz").status_code == 200
        assert_error(anon.post("/v1/predict", content=cnn, headers=OCTET), 401, "unauthorized")
        assert_error(anon.get("/v1/models"), 401, "unauthorized")
        wrong = {**OCTET, "Authorization": "Bearer wrong"}
        assert_error(anon.post("/v1/predict", content=cnn, headers=wrong), 401, "unauthorized")


def test_concurrent_requests_are_batched_and_replica_survives(server):
    bodies = [B.to_bytes(B.cnn_model(hw=8 + i)) for i in range(6)] + [b"garbage"] * 2

    def post(body):
        return server.post("/v1/predict?batch_size=2", content=body, headers=OCTET)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = [r.status_code for r in pool.map(post, bodies)]
    assert codes == [200] * 6 + [400] * 2
    assert server.get("/healthz").status_code == 200
    assert server.post("/v1/predict", content=cnn, headers=OCTET).status_code == 200


def test_yaml_config_is_valid_and_loopback(dirs, monkeypatch):
    from ray.serve.schema import ServeDeploySchema

    from trappm_ray.serving import app as S
    from trappm_ray.model.predictor import PredictorError

    config = yaml.safe_load(YAML.read_text())
    schema = ServeDeploySchema.model_validate(config)
    assert schema.http_options.host == "127.0.0.1"
    app = config["applications"][0]
    assert app["import_path"] == "trappm_ray.serving.app:build_app" and app["args"]["predictor"] == "default"
    auto = app["deployments"][0]["autoscaling_config"]
    assert {"min_replicas", "max_replicas", "target_ongoing_requests"} <= auto.keys()
    assert app["deployments"][0]["name"] == "TrappmPredictor"
    args = {**app["args"], "predictor": str(dirs / "predictor")}
    assert type(S.build_app(args)).__name__ == "Application"
    with pytest.raises(ValueError, match="unknown serve args"):
        S.build_app({"nope": 1})
    import trappm_ray.serving.routing as P

    monkeypatch.setattr(P, "DEFAULT_DIR", dirs / "no-default")
    monkeypatch.setattr(P, "_LOADED", {})
    with pytest.raises(PredictorError, match="no default predictor"):
        S.build_app(app["args"])


@pytest.mark.slow
def test_serve_run_yaml_subprocess(dirs, tmp_path):
    """``serve run`` on a copy of the shipped YAML (own port, test predictor), as a user would."""
    config = yaml.safe_load(YAML.read_text())
    port = free_port()
    config["http_options"]["port"] = port
    config["applications"][0]["args"]["predictor"] = str(dirs / "predictor")
    config["applications"][0]["deployments"][0]["autoscaling_config"]["max_replicas"] = 1
    path = tmp_path / "predict.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "TRAPPM_SERVE_TOKEN"}
    # Without an address `serve run` joins the cluster named in /tmp/ray/ray_current_cluster,
    # which a `ray start` leaves behind: in CI it named a host that was gone and no replica
    # ever came up. "local" always starts serve run's own cluster.
    env.update(RAY_ADDRESS="local", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    serve_bin = str(Path(sys.executable).with_name("serve"))
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([serve_bin, "run", str(path)], env=env, cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, r = time.time() + 240, None
        while time.time() < deadline and proc.poll() is None:
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/v1/predict", content=cnn, headers=OCTET,
                               timeout=30)
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        tail = log.read_text(errors="replace")[-3000:]
        assert r is not None and r.status_code == 200, (r and r.text, proc.returncode, tail)
        bad = httpx.post(f"http://127.0.0.1:{port}/v1/predict", content=b"junk", headers=OCTET)
        assert_error(bad, 400, "corrupt_protobuf")
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        os.killpg(proc.pid, 2)  # SIGINT: serve run shuts Serve and its local cluster down
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


class _Streamed:
    """A stand-in request whose body arrives in chunks (unit test of the upload path)."""

    def __init__(self, data: bytes, length: bool = True):
        self.data = data
        self.headers = {"content-length": str(len(data))} if length else {}

    async def stream(self):
        for i in range(0, len(self.data), 65536):
            yield self.data[i:i + 65536]


def test_a_raw_upload_is_streamed_to_disk_and_read_without_its_weights():
    import asyncio

    from trappm_ray.graph.featurize import featurize
    from trappm_ray.serving.app import ApiError, upload_without_weights

    big = B.to_bytes(B.gemm_model(k=1024, n=1024))  # 4 MB of weights
    got = asyncio.run(upload_without_weights(_Streamed(big), 8 * 2**20))
    assert len(got) < len(big) / 4
    assert featurize(got, 2).static["params"] == featurize(big, 2).static["params"]
    for length in (True, False):  # declared, or found out while streaming
        with pytest.raises(ApiError, match="limit of|limit 1,048,576"):
            asyncio.run(upload_without_weights(_Streamed(big, length), 2**20))
