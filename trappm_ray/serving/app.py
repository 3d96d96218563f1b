"""Ray Serve app: predictions over HTTP (FastAPI), autoscaled, batched, cached.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 serve run serve_configs/predict.yaml

Routes: ``POST /v1/predict`` (an ONNX body as ``application/octet-stream``, a multipart upload,
or JSON ``{"uri": ..., options}``; options of a raw body go in the query string),
``GET /v1/models``, ``GET /healthz``. Bad input is a 4xx JSON ``{"error": {"code", "message"}}``
and never harms the replica. Nothing runs at import: :func:`build_app` is the YAML's builder.
"""
# No ``from __future__ import annotations``: FastAPI reads the route parameters' annotations
# at runtime, and as strings Serve's ingress wrapper cannot resolve ``Request``.
import asyncio
import email.parser
import email.policy
import hashlib
import hmac
import json
import os
import tempfile
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from trappm_ray import errors
from trappm_ray import storage
from trappm_ray.graph.onnx_io import MAX_FILE_BYTES, Limits, read_model
from trappm_ray.serving.plan import cluster_text, data_parallel_zero

RAW_TYPES = {"application/octet-stream", "application/onnx", "application/x-onnx",
             "application/x-protobuf",
             # curl's default for --data-binary: the body is still the raw file
             "application/x-www-form-urlencoded"}
MAX_JSON_BYTES = 64 * 1024
OPTION_NAMES = ("batch_size", "resolution", "memory_budget_mb", "steps", "price_per_hour",
                "interval_z", "precision", "optimizer", "gpus", "memory_format", "recompute", "grad_accum",
                "device", "power_limit_w", "price_per_kwh", "layers", "cluster", "global_batch")


def _flag(raw) -> bool:
    """A yes/no option from JSON (true/false) or a query string (1/0, true/false, yes/no)."""
    value = str(raw).strip().lower()
    if value not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError(f"expected true or false, got {raw!r}")
    return value in ("1", "true", "yes")


_CONVERT = {"batch_size": int, "resolution": int, "steps": int, "gpus": int, "layers": int, "cluster": cluster_text,
            "precision": str, "grad_accum": int, "global_batch": int, "recompute": _flag,
            "optimizer": str, "memory_format": str, "device": str}


@dataclass
class ServeSettings:
    """The ``args`` of the app in the Serve YAML.

    Args:
        predictor: predictor directory or ``s3://`` URI; ``default`` = the shipped one.
        allowed_roots: local directories whose files JSON ``uri`` requests may name.
        allowed_s3_prefixes: ``s3://bucket/prefix`` that JSON ``uri`` requests may name.
        max_body_mb: limit on a JSON or multipart request body (held in memory) and on a model
            read from a ``uri``.
        max_upload_mb: limit on a raw upload (``application/octet-stream``): streamed to a
            temporary file and read without its weights, so a 2 GiB export costs its graph's
            structure in memory, not its weights.
        token_env: name of an environment variable holding a bearer token; when that variable
            is set and non-empty, ``/v1/*`` requires ``Authorization: Bearer <token>``.
        cache_size: results kept per replica, keyed by model hash and options.
        max_batch_size, batch_wait_timeout_s: ``@serve.batch`` settings.
        max_batch_search: upper end of the largest-batch search.
    """

    predictor: str = "default"
    allowed_roots: tuple[str, ...] = ()
    allowed_s3_prefixes: tuple[str, ...] = ()
    max_body_mb: float = 64.0
    max_upload_mb: float = 2048.0
    token_env: str = ""
    cache_size: int = 1024
    max_batch_size: int = 8
    batch_wait_timeout_s: float = 0.005
    max_batch_search: int = 4096

    @classmethod
    def from_args(cls, args: dict | None) -> "ServeSettings":
        args = dict(args or {})
        unknown = set(args) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown serve args: {sorted(unknown)}")
        for key in ("allowed_roots", "allowed_s3_prefixes"):
            if key in args:
                args[key] = tuple(args[key] or ())
        return cls(**args)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 2**20)

    @property
    def max_upload_bytes(self) -> int:
        return min(int(self.max_upload_mb * 2**20), MAX_FILE_BYTES)


class ApiError(Exception):
    """A request the server refuses, with its HTTP status and a machine-readable code."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def read_body(request: Request, limit: int, hint: str = "") -> bytes:
    """The request body, refused with 413 as soon as it exceeds ``limit`` bytes."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ApiError(413, "too_large", f"body is {int(length):,} bytes, limit {limit:,}{hint}")
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise ApiError(413, "too_large", f"body exceeds the limit of {limit:,} bytes")
    return bytes(buf)


def _fields(raw: dict) -> dict:
    """The options present in query or JSON fields, converted (``dims`` as ``{name: int}``)."""
    kw = {name: _CONVERT.get(name, float)(raw[name]) for name in OPTION_NAMES if raw.get(name) not in (None, "")}
    dims = raw.get("dims") or {}
    if isinstance(dims, str):  # query string: dims=seq:128,heads:8
        dims = dict(item.split(":", 1) for item in dims.split(",") if item)
    kw["dims"] = {str(k): int(v) for k, v in dict(dims).items()}
    return kw


@contextmanager
def _as_api_errors():
    """Bad option values become a 400 with one line."""
    try:
        yield
    except errors.BadOption as e:
        raise ApiError(e.status, e.code, str(e).split(": ", 1)[-1]) from None
    except (TypeError, ValueError) as e:
        raise ApiError(400, "bad_options", str(e).splitlines()[0][:300]) from None


def parse_options(raw: dict, max_batch: int):
    """:class:`PredictOptions` from query or JSON fields (``parallel``: ``dp``, ``fsdp`` or
    ``zero1``-``zero3``, the layouts a graph is answered in); 400 on bad values."""
    from trappm_ray.serving.api import PredictOptions

    with _as_api_errors():
        kw = _fields(raw)
        zero = data_parallel_zero(str(raw["parallel"]) if raw.get("parallel") else None, kw.get("gpus"))
        if zero is None:
            raise errors.BadOption("a tensor or pipeline layout is answered for a transformers config (POST it as "
                                   "JSON), not an ONNX file")
        return PredictOptions(**{**kw, "dims": tuple(sorted(kw["dims"].items()))}, max_batch=max_batch, zero=zero)


def config_options(raw: dict) -> dict:
    """Keyword arguments of :func:`trappm_ray.serving.api.predict` from a config request's JSON
    fields: the options of :func:`parse_options` and ``parallel`` (a layout); 400 on bad values
    (the rest is checked where a file's options are)."""
    with _as_api_errors():
        return {**_fields(raw), **({"parallel": str(raw["parallel"])} if raw.get("parallel") else {})}


async def upload_without_weights(request: Request, limit: int) -> bytes:
    """A raw upload streamed to a temporary file (never whole in memory), refused with 413 past
    ``limit`` bytes, and read back without its weights (:func:`trappm_ray.graph.onnx_io.read_model`)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ApiError(413, "too_large", f"upload is {int(length):,} bytes, limit {limit:,}")
    fd, path = tempfile.mkstemp(prefix="trappm-upload-", suffix=".onnx")
    try:
        size = 0
        with os.fdopen(fd, "wb") as fh:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "too_large", f"upload exceeds the limit of {limit:,} bytes")
                fh.write(chunk)
        return await asyncio.to_thread(lambda: read_model(path, Limits(max_file_bytes=limit)).SerializeToString())
    finally:
        os.unlink(path)


def multipart_file(body: bytes, content_type: str) -> tuple[bytes, dict]:
    """The uploaded file and the other form fields of a ``multipart/form-data`` body."""
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    data, form = None, {}
    for part in msg.iter_parts() if msg.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None or name == "file":
            data = payload if data is None else data
        elif name:
            form[name] = payload.decode("utf-8", "replace")
    if data is None:
        raise ApiError(400, "no_file", "multipart body has no file part (use the field 'file')")
    return data, form


def read_uri(uri: str, settings: ServeSettings) -> bytes:
    """Model bytes from an allowed ``s3://`` prefix or local root; 403 for anything else."""
    if uri.startswith("s3://"):
        allowed = any(uri.startswith(p.rstrip("/") + "/") for p in settings.allowed_s3_prefixes)
        if not allowed or "/../" in uri:
            raise ApiError(403, "uri_forbidden", "uri is not under an allowed s3 prefix")
    elif "://" in uri:
        raise ApiError(400, "bad_uri", "uri must be s3:// or a server path")
    else:
        real = os.path.realpath(uri)  # symlinks and .. resolved before the containment check
        roots = [os.path.realpath(r) for r in settings.allowed_roots]
        if not any(os.path.commonpath([real, r]) == r for r in roots):
            raise ApiError(403, "uri_forbidden", "path is not under an allowed root")
        uri = real
    try:
        fs, path = storage.fs_and_path(uri)
        if not fs.isfile(path):
            raise ApiError(404, "not_found", "no file at uri")
        if fs.size(path) > settings.max_body_bytes:
            raise ApiError(413, "too_large", f"model exceeds {settings.max_body_bytes:,} bytes")
        return storage.read_bytes(uri)
    except OSError as e:
        raise ApiError(404, "not_found", f"cannot read uri ({e.__class__.__name__})") from None


api = FastAPI(title="trappm-ray", docs_url=None, redoc_url=None, openapi_url=None)


@serve.deployment(name="TrappmPredictor", max_ongoing_requests=32,
                  autoscaling_config={"min_replicas": 1, "max_replicas": 2,
                                      "target_ongoing_requests": 4},
                  ray_actor_options={"num_cpus": 1})
@serve.ingress(api)
class TrappmPredictor:
    """One replica: a loaded predictor, a result cache and the HTTP routes."""

    def __init__(self, settings: dict):
        from trappm_ray.serving.api import device_of, load_predictor, model_version

        self.settings = ServeSettings.from_args(settings)
        self.predictor = load_predictor(self.settings.predictor)
        m = self.predictor.manifest
        self.info = {"model_version": model_version(self.predictor), "name": m.name,
                     "version": m.version, "device": device_of(self.predictor),
                     "targets": list(self.predictor.targets),
                     "seeds": list(m.network.seeds) if m.network is not None else None,
                     "feature_set": m.feature_set, "metrics": m.metrics}
        # Read once; the value is only ever compared, never logged or returned.
        self._token = os.environ.get(self.settings.token_env, "") if self.settings.token_env else ""
        self.cache: OrderedDict[str, dict] = OrderedDict()
        self.predict_batch.set_max_batch_size(self.settings.max_batch_size)
        self.predict_batch.set_batch_wait_timeout_s(self.settings.batch_wait_timeout_s)

    def _authorized(self, request: Request) -> bool:
        if not self._token:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                                  self._token.encode())

    @api.get("/healthz")
    async def healthz(self) -> dict:
        return {"status": "ok", "model_version": self.info["model_version"]}

    @api.get("/v1/models")
    async def models(self, request: Request):
        if not self._authorized(request):
            return error_response(401, "unauthorized", "missing or wrong bearer token")
        from trappm_ray.serving.api import device_catalog

        # ?device= on /v1/predict picks any of these: shipped predictors, then the spec table's
        # GPUs that the spec-based predictor serves
        return {"models": [self.info], "devices": device_catalog()}

    @api.post("/v1/predict")
    async def predict(self, request: Request):
        if not self._authorized(request):
            return error_response(401, "unauthorized", "missing or wrong bearer token")
        try:
            parsed = await self._parse(request)
            if isinstance(parsed, dict):
                return await self._predict_config(parsed)
            data, opts, label = parsed
            key = hashlib.sha256(data).hexdigest() + opts.key()
            if key in self.cache:
                self.cache.move_to_end(key)
                # same bytes and options, maybe another name: the label is the request's own
                return {**self.cache[key], "model": label, "cached": True}
            result = await self.predict_batch((data, opts, label))
            if isinstance(result, errors.ModelError):
                return error_response(result.status, result.code, str(result))
            self.cache[key] = result
            if len(self.cache) > self.settings.cache_size:
                self.cache.popitem(last=False)
            return {**result, "cached": False}
        except ApiError as e:
            return error_response(e.status, e.code, e.message)
        except errors.ModelError as e:
            return error_response(e.status, e.code, str(e))
        except Exception as e:  # noqa: BLE001 - a bug answers 500 JSON, the replica lives on
            return error_response(500, "internal", e.__class__.__name__)

    async def _parse(self, request: Request):
        s = self.settings
        ctype = request.headers.get("content-type", "")
        media = ctype.split(";")[0].strip().lower()
        if media == "application/json":
            try:
                body = json.loads(await read_body(request, MAX_JSON_BYTES))
            except (ValueError, UnicodeDecodeError):
                raise ApiError(400, "bad_json", "body is not valid JSON") from None
            if isinstance(body, dict) and isinstance(body.get("config"), dict):
                return body
            if not isinstance(body, dict) or not isinstance(body.get("uri"), str):
                raise ApiError(400, "bad_json", "JSON body needs a string 'uri' or a transformers 'config' object")
            opts = parse_options(body, s.max_batch_search)
            return await asyncio.to_thread(read_uri, body["uri"], s), opts, body["uri"]
        if media in RAW_TYPES:
            data = await upload_without_weights(request, s.max_upload_bytes)
            return data, parse_options(dict(request.query_params), s.max_batch_search), "<upload>"
        if media == "multipart/form-data":
            hint = (f"; send the file alone as application/octet-stream for up to {s.max_upload_bytes:,} bytes, "
                    f"options in the query string")
            data, form = multipart_file(await read_body(request, s.max_body_bytes, hint), ctype)
            opts = parse_options({**request.query_params, **form}, s.max_batch_search)
            return data, opts, "<upload>"
        raise ApiError(415, "unsupported_media_type",
                       f"content type '{media[:80]}' not accepted: send application/octet-stream, "
                       "multipart/form-data or application/json with a 'uri'")

    async def _predict_config(self, body: dict):
        """A transformers config sent as JSON with its options (``parallel`` a layout): answered
        as :func:`trappm_ray.serving.api.predict` answers it, outside the batch (it exports the
        config itself); cached by the whole body."""
        key = "config:" + json.dumps(body, sort_keys=True)
        if key in self.cache:
            self.cache.move_to_end(key)
            return {**self.cache[key], "cached": True}
        kw = config_options(body)
        result = await asyncio.to_thread(self._run_config, body["config"], kw)
        self.cache[key] = result
        if len(self.cache) > self.settings.cache_size:
            self.cache.popitem(last=False)
        return {**result, "cached": False}

    def _run_config(self, config: dict, kw: dict) -> dict:
        from trappm_ray.serving.api import predict

        return predict(config, predictor=None if kw.get("device") else self.predictor, **kw).to_dict()

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def predict_batch(self, items: list[tuple]) -> list:
        # The work is CPU-bound: a thread keeps the event loop free to accept and queue requests.
        return await asyncio.to_thread(self._run_batch, items)

    def _run_batch(self, items: list[tuple]) -> list:
        from trappm_ray.serving.api import predict_many

        results = predict_many(list(items), self.predictor)
        return [r if isinstance(r, errors.ModelError) else r.to_dict() for r in results]


def build_app(args: dict | None = None):
    """The application for ``serve run`` (the YAML's ``import_path``); ``args`` as in
    :class:`ServeSettings`. Fails here, with one line, if the predictor cannot be loaded."""
    from trappm_ray.serving.api import load_predictor

    settings = ServeSettings.from_args(args)
    load_predictor(settings.predictor)  # a missing default predictor is reported at deploy time
    return TrappmPredictor.bind(asdict(settings))


__all__ = ["ServeSettings", "ApiError", "TrappmPredictor", "build_app", "api", "read_uri",
           "parse_options", "config_options", "multipart_file"]
