"""Every cluster and Serve config in the repository validates, and pins the project's versions.

Launcher configs go through Ray's own preparation and JSON-schema validation (what `ray up` runs
before it touches a cloud); Serve configs through Ray Serve's schema; KubeRay manifests, which no
local tool validates, through a structural check of the ray.io/v1 fields they use.
"""
import copy
import glob
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import ray
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ["cluster/aws.yaml", "cluster/gcp.yaml"]
KUBERAY = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cluster/kuberay").glob("*.yaml"))
SERVE = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "serve_configs").glob("*.yaml"))
PY = f"py{sys.version_info.major}{sys.version_info.minor}"
CPU_IMAGE = f"rayproject/ray:{ray.__version__}-{PY}"
GPU_IMAGE = f"{CPU_IMAGE}-gpu"


def load(rel: str):
    return yaml.safe_load((ROOT / rel).read_text())


def pinned_requirements() -> list[str]:
    """pyproject.toml's dependencies and zoo/train extras, less Ray (the images carry it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in ("zoo", "train")
                                      for r in project["optional-dependencies"][extra]]
    out = []
    for r in reqs:
        r = r.replace(" ", "")
        if not r.startswith("ray[") and r not in out:
            out.append(r)
    return sorted(out)


def test_pinned_requirements_are_the_project_pins():
    reqs = pinned_requirements()
    assert "torch==2.14.1" in reqs and not any(r.startswith("ray") for r in reqs)


# ---------------------------------------------------------------- cluster launcher (ray up)

def _validate_launcher(config: dict) -> dict:
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.mark.parametrize("rel", LAUNCHER)
def test_launcher_config_passes_ray_validation(rel):
    _validate_launcher(load(rel))


@pytest.mark.parametrize("mutate", [
    lambda c: c.update(max_worker=4),  # misspelt top-level key
    lambda c: c["available_node_types"]["gpu"].update(resources={"GPU": "one"}),
    lambda c: c.update(head_node_type="nope"),
])
def test_launcher_validation_rejects_broken_configs(mutate):
    # The validator above must be able to fail, or passing it means nothing.
    config = load(LAUNCHER[0])
    mutate(config)
    with pytest.raises(Exception):
        _validate_launcher(config)


@pytest.mark.parametrize("rel", LAUNCHER)
def test_launcher_config_shape_and_pins(rel):
    c = _validate_launcher(load(rel))
    docker = c["docker"]
    assert docker["head_image"] == CPU_IMAGE and docker["worker_image"] == GPU_IMAGE
    for key in ("head_run_options", "worker_run_options"):
        assert any(o.startswith("--shm-size=") for o in docker[key]), key
    types = c["available_node_types"]
    head = types[c["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu = [t for name, t in types.items() if name != c["head_node_type"]]
    assert len(gpu) == 1 and gpu[0]["resources"]["GPU"] >= 1
    assert gpu[0]["min_workers"] == 0 < gpu[0]["max_workers"] <= c["max_workers"]
    # Dependencies come from pyproject.toml's pins, not a second list here.
    assert any("pip install" in cmd and "[zoo,train]" in cmd for cmd in c["setup_commands"])
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert any("RAY_AUTH_MODE=token" in cmd and "ray start" in cmd for cmd in c[key]), key
    assert "~/.ray/auth_token" in c["file_mounts"]
    assert ".gitignore" in c["rsync_filter"]  # keeps .venv and artifacts off the nodes


# ---------------------------------------------------------------- Serve configs

def _check_serve_config(cfg: dict):
    """Ray Serve's schema, plus no keys the schema would silently ignore."""
    from ray.serve.schema import DeploymentSchema, ServeApplicationSchema, ServeDeploySchema

    ServeDeploySchema.model_validate(cfg)
    unknown = set(cfg) - set(ServeDeploySchema.model_fields)
    for app in cfg["applications"]:
        unknown |= set(app) - set(ServeApplicationSchema.model_fields)
        for dep in app.get("deployments", []):
            unknown |= set(dep) - set(DeploymentSchema.model_fields)
    assert not unknown, f"keys Serve does not know: {sorted(unknown)}"


@pytest.mark.parametrize("rel", SERVE)
def test_serve_config_passes_serve_schema(rel):
    cfg = load(rel)
    _check_serve_config(cfg)
    for app in cfg["applications"]:
        module = app["import_path"].split(":")[0]
        assert (ROOT / (module.replace(".", "/") + ".py")).exists(), app["import_path"]


def test_serve_check_rejects_unknown_keys():
    with pytest.raises(AssertionError, match="import_pth"):
        _check_serve_config({"applications": [{"import_path": "a:b", "import_pth": "a:b"}]})


# ---------------------------------------------------------------- KubeRay manifests

# The ray.io/v1 fields (KubeRay 1.5+) these manifests may use, per object; anything else is a
# typo the operator would reject or, worse, drop.
CLUSTER_KEYS = {"rayVersion", "authOptions", "enableInTreeAutoscaling", "autoscalerOptions",
                "headGroupSpec", "workerGroupSpecs", "headServiceAnnotations", "suspend",
                "gcsFaultToleranceOptions"}
HEAD_KEYS = {"rayStartParams", "template", "serviceType", "headService", "enableIngress"}
WORKER_KEYS = {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams",
               "template", "numOfHosts", "idleTimeoutSeconds", "suspend", "scaleStrategy"}
SPEC_KEYS = {
    "RayCluster": CLUSTER_KEYS,
    "RayJob": {"entrypoint", "runtimeEnvYAML", "shutdownAfterJobFinishes",
               "ttlSecondsAfterFinished", "activeDeadlineSeconds", "rayClusterSpec",
               "clusterSelector", "submissionMode", "backoffLimit", "entrypointNumCpus",
               "entrypointNumGpus", "entrypointResources", "submitterPodTemplate",
               "submitterConfig", "suspend", "deletionStrategy", "jobId", "metadata"},
    "RayService": {"serveConfigV2", "rayClusterConfig", "upgradeStrategy", "serveService",
                   "excludeHeadPodFromServeSvc", "rayClusterDeletionDelaySeconds"},
}
CLUSTER_OF = {"RayCluster": lambda s: s, "RayJob": lambda s: s["rayClusterSpec"],
              "RayService": lambda s: s["rayClusterConfig"]}
EXPECTED_KIND = {"raycluster.yaml": "RayCluster", "rayservice.yaml": "RayService",
                 "rayjob-pretrain.yaml": "RayJob", "rayjob-train-regressors.yaml": "RayJob"}


def _unknown(obj: dict, allowed: set, where: str):
    extra = set(obj) - allowed
    assert not extra, f"{where}: fields KubeRay does not have: {sorted(extra)}"


def _check_pod(template: dict, where: str, gpu: bool) -> list[dict]:
    spec = template["spec"]
    containers = spec["containers"]
    assert containers, where
    c = containers[0]
    assert c["image"] == (GPU_IMAGE if gpu else CPU_IMAGE), f"{where}: {c['image']}"
    res = c["resources"]
    # requests == limits: the Ray node advertises exactly what Kubernetes reserved for it.
    assert res["requests"] == res["limits"], where
    assert ("nvidia.com/gpu" in res["limits"]) == gpu, where
    if gpu:
        assert res["limits"]["nvidia.com/gpu"] >= 1
    shm = {v["name"] for v in spec.get("volumes", [])
           if v.get("emptyDir", {}).get("medium") == "Memory"}
    mounts = {m["name"] for m in c.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"}
    assert shm & mounts, f"{where}: no memory-backed /dev/shm"
    return containers


def check_kuberay(doc: dict) -> dict:
    """Structural check of one manifest; returns its RayCluster spec."""
    assert doc["apiVersion"] == "ray.io/v1"
    kind = doc["kind"]
    assert kind in SPEC_KEYS, kind
    assert doc["metadata"]["name"]
    _unknown(doc["spec"], SPEC_KEYS[kind], f"{kind}.spec")
    cluster = CLUSTER_OF[kind](doc["spec"])
    _unknown(cluster, CLUSTER_KEYS, f"{kind} cluster")
    assert cluster["rayVersion"] == ray.__version__
    assert cluster["authOptions"] == {"mode": "token"}
    head = cluster["headGroupSpec"]
    _unknown(head, HEAD_KEYS, "headGroupSpec")
    # KubeRay's rayStartParams is map[string]string: a bare number or bool is rejected.
    assert all(isinstance(v, str) for v in head["rayStartParams"].values())
    _check_pod(head["template"], "head", gpu=False)
    groups = cluster["workerGroupSpecs"]
    assert groups and len({g["groupName"] for g in groups}) == len(groups)
    for g in groups:
        _unknown(g, WORKER_KEYS, f"workerGroup {g['groupName']}")
        assert all(isinstance(v, str) for v in g["rayStartParams"].values())
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        gpu = g["groupName"] == "gpu"
        _check_pod(g["template"], g["groupName"], gpu=gpu)
        if gpu:
            tolerations = g["template"]["spec"].get("tolerations", [])
            assert any(t["key"] == "nvidia.com/gpu" for t in tolerations)
    return cluster


def _runtime_env_ok(env: dict, where: str):
    wd = env["working_dir"]
    assert wd.endswith(".zip") and wd.split("://")[0] in ("https", "s3", "gs"), where
    assert sorted(r.replace(" ", "") for r in env["pip"]) == pinned_requirements(), where


def test_every_manifest_is_known():
    assert sorted(Path(k).name for k in KUBERAY) == sorted(EXPECTED_KIND)


@pytest.mark.parametrize("rel", KUBERAY)
def test_kuberay_manifest_structure(rel):
    doc = load(rel)
    assert doc["kind"] == EXPECTED_KIND[Path(rel).name]
    check_kuberay(doc)


@pytest.mark.parametrize("mutate", [
    lambda d: d["spec"].update(workerGroupSpec=d["spec"].pop("workerGroupSpecs")),
    lambda d: d["spec"].update(rayVersion="2.9.0"),
    lambda d: d["spec"]["headGroupSpec"]["template"]["spec"].pop("volumes"),
    lambda d: d["spec"]["workerGroupSpecs"][0]["rayStartParams"].update({"num-gpus": 1}),
    lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    .update(image="rayproject/ray:latest-gpu"),
])
def test_kuberay_check_rejects_broken_manifests(mutate):
    doc = load("cluster/kuberay/raycluster.yaml")
    mutate(doc)
    with pytest.raises((AssertionError, KeyError)):
        check_kuberay(doc)


def test_raycluster_gpu_group_autoscales_and_installs_pins():
    doc = load("cluster/kuberay/raycluster.yaml")
    cluster = check_kuberay(doc)
    assert cluster["enableInTreeAutoscaling"] is True
    gpu = [g for g in cluster["workerGroupSpecs"] if g["groupName"] == "gpu"]
    assert gpu and gpu[0]["minReplicas"] == 0 < gpu[0]["maxReplicas"]
    # Pods install the pins before the generated `ray start`, which the annotation allows.
    assert doc["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    templates = [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]]
    for t in templates:
        script = " ".join(t["spec"]["containers"][0]["args"])
        assert script.rstrip().endswith("$KUBERAY_GEN_RAY_START_CMD")
        words = shlex.split(script.split("&&")[0])
        assert words[:3] == ["pip", "install", "-q"]
        assert sorted(words[3:]) == pinned_requirements()


@pytest.mark.parametrize("rel", [k for k in KUBERAY if Path(k).name.startswith("rayjob-")])
def test_rayjob_entrypoint_and_runtime_env(rel):
    from test_job_submit import check_job_argv

    spec = load(rel)["spec"]
    words = shlex.split(spec["entrypoint"])
    assert words[0] == "python" and (ROOT / words[1]).is_file(), words[:2]
    check_job_argv(words[1], words[2:])
    _runtime_env_ok(yaml.safe_load(spec["runtimeEnvYAML"]), rel)
    assert spec["shutdownAfterJobFinishes"] is True


def test_rayservice_embeds_the_serve_config():
    spec = load("cluster/kuberay/rayservice.yaml")["spec"]
    embedded = yaml.safe_load(spec["serveConfigV2"])
    _check_serve_config(embedded)
    # Inside a pod Serve must listen beyond loopback, or the Kubernetes Service reaches nothing.
    assert embedded["http_options"]["host"] == "0.0.0.0"
    apps = copy.deepcopy(embedded["applications"])
    for app in apps:
        _runtime_env_ok(app.pop("runtime_env"), "rayservice")
    source = ROOT / "serve_configs/predict.yaml"
    if source.exists():
        local = copy.deepcopy(yaml.safe_load(source.read_text())["applications"])
        for app in local:
            app.pop("runtime_env", None)
        assert apps == local, "rayservice.yaml's applications drifted from predict.yaml"
    else:
        assert [a["import_path"] for a in apps] == ["trappm_ray.serving.app:app"]


# ---------------------------------------------------------------- local head script

def test_local_head_script_parses_and_env_holds_no_secret(tmp_path):
    script = str(ROOT / "cluster/local_head.sh")
    subprocess.run(["bash", "-n", script], check=True)
    (tmp_path / "auth_token").write_text("not-a-real-token")
    out = subprocess.run(["bash", script, "env"], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "TRAPPM_RAY_DIR": str(tmp_path)}).stdout
    assert "not-a-real-token" not in out
    assert f"RAY_AUTH_TOKEN_PATH={tmp_path}/auth_token" in out and "RAY_AUTH_MODE=token" in out


def test_launcher_globs_cover_cluster_dir():
    # A new launcher YAML next to these must be added to LAUNCHER (and so validated).
    assert sorted(Path(p).name for p in glob.glob(str(ROOT / "cluster/*.yaml"))) == sorted(
        Path(p).name for p in LAUNCHER)
