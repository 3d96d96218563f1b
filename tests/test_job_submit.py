"""The README's cluster journey, run as written: `ray job submit` to a token-auth Ray head on
127.0.0.1 (cluster/local_head.sh, started here), storage on the real S3 server.

Each README command runs with tiny-size flags appended (argparse keeps the last value), so the
journey is exercised exactly as users type it, only smaller.
"""
import ast
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from ports import free_ports

ROOT = Path(__file__).resolve().parents[1]
HEAD = ROOT / "cluster/local_head.sh"
VENV_BIN = ROOT / ".venv/bin"

# Appended to the README's command for each job: the smallest run that still goes through every
# stage of the job (export + graphs, a DDP epoch with a checkpoint, ...). A README command whose
# job has no entry here fails the test; add its tiny flags with the command.
TINY = {
    "jobs/build_dataset.py": ["--archs", "test_resnet", "--resolutions", "32",
                              "--batch-sizes", "1,2"],
    # CPU stands in for CUDA; one batch size, one timed step.
    "jobs/collect_labels.py": ["--device", "cpu", "--archs", "test_resnet", "--resolutions", "32",
                               "--batch-sizes", "1", "--warmup", "1", "--steps", "1"],
    "jobs/pretrain_gae.py": ["--dims", "32,16", "--epochs", "1", "--batch-size", "2",
                             "--num-workers", "1", "--cpus-per-worker", "0.5",
                             "--use-gpu", "false", "--max-failures", "0"],
    "jobs/batch_predict.py": [],
    # Step 2's single tiny label row cannot be split into train and validation: the committed
    # CPU labels (uploaded with the working dir) stand in; the encoder is step 3's.
    "jobs/train_regressors.py": ["--labels", "data/labels", "--targets", "train_step_ms",
                                 "--seeds", "1337", "--max-epochs", "1"],
    # No second device here: the committed CPU labels stand in for the new device's
    # (NEW_DEVICE is set to their slug below).
    "jobs/finetune_predictor.py": ["--labels", "data/labels", "--epochs", "1"],
}


def job_flags(job: str) -> set[str]:
    """The ``--flags`` a job accepts, read from its source (importing torch & co. takes minutes
    on a loaded 1-core box): its own ``add_argument`` calls, or the fields of the dataclass it
    hands to ``parse_config``."""
    tree = ast.parse((ROOT / job).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    flags = {c.args[0].value for c in calls
             if getattr(c.func, "attr", None) == "add_argument" and c.args
             and isinstance(c.args[0], ast.Constant) and c.args[0].value.startswith("--")}
    if flags:
        return flags
    cls = next(c.args[0].id for c in calls if getattr(c.func, "id", None) == "parse_config")
    module = next(n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  and any(a.name == cls for a in n.names))
    source = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    body = next(n for n in source.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return {"--" + f.target.id.replace("_", "-") for f in body if isinstance(f, ast.AnnAssign)}


def check_job_argv(job: str, argv: list[str]):
    """Every ``--flag`` in ``argv`` is one the job has."""
    unknown = [a for a in argv if a.startswith("--") and a.split("=")[0] not in job_flags(job)]
    assert not unknown, f"{job} has no {unknown}"


def readme_journey() -> list[str]:
    """The shell commands between the README's journey markers, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- journey -->(.*?)<!-- /journey -->", text, re.S)
    assert m, "README.md lost its <!-- journey --> ... <!-- /journey --> markers"
    body = "\n".join(re.findall(r"```bash\n(.*?)```", m.group(1), re.S))
    body = body.replace("\\\n", " ")
    return [line.strip() for line in body.splitlines()
            if line.strip() and not line.strip().startswith("#")]


# Journey lines the `head` fixture below performs itself (same script, same commands).
SETUP = ("bash cluster/local_head.sh start", 'eval "$(bash cluster/local_head.sh env)"',
         "export STORE=")


def kind(cmd: str) -> str:
    """What runs a journey line: setup (the fixture), submit, or serve; anything else is a
    README command no test exercises."""
    if cmd.startswith(SETUP):
        return "setup"
    if cmd.startswith("ray job submit --working-dir . -- python jobs/"):
        return "submit"
    if cmd.startswith("serve "):
        return "serve"
    raise AssertionError(f"no test runs this README command: {cmd}")


def job_of(cmd: str) -> tuple[str, list[str]]:
    """(job file, its argv) of a `ray job submit` line."""
    words = shlex.split(cmd)
    entry = words[words.index("--") + 1:]
    return entry[1], entry[2:]


def test_readme_journey_commands_parse():
    """Every journey line is one the slow test runs; every job it names exists and has the
    flags given (and so do the tiny flags)."""
    lines = readme_journey()
    assert [kind(c) for c in lines][:3] == ["setup"] * 3
    jobs = [job_of(c)[0] for c in lines if kind(c) == "submit"]
    assert jobs[:2] == ["jobs/build_dataset.py", "jobs/collect_labels.py"]
    for cmd in lines:
        if kind(cmd) == "submit":
            job, argv = job_of(cmd)
            assert (ROOT / job).is_file(), cmd
            check_job_argv(job, argv)
    for job, argv in TINY.items():
        check_job_argv(job, argv)
    with pytest.raises(AssertionError, match="--epoch"):
        check_job_argv("jobs/pretrain_gae.py", ["--epoch", "1"])


def test_every_readme_job_command_names_real_flags():
    """Outside the journey too: each `python jobs/X.py ...` line of the README names an existing
    job and only flags it has (the jobs' runs are covered by the journey, the demo and tests)."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    lines = [ln for block in re.findall(r"```bash\n(.*?)```", text, re.S) for ln in block.splitlines()
             if re.search(r"python jobs/\w+\.py", ln)]
    assert len(lines) >= 8
    for line in lines:
        words = shlex.split(line.split("#")[0])
        i = next(k for k, w in enumerate(words) if re.fullmatch(r"jobs/\w+\.py", w))
        assert (ROOT / words[i]).is_file(), line
        check_job_argv(words[i], words[i + 1:])


# ---------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A Ray head of our own: fresh state dir, free ports, the S3 settings in its environment."""
    if not os.environ.get("AWS_ENDPOINT_URL"):  # as conftest's s3_prefix: never skipped in CI
        if os.environ.get("CI"):
            pytest.fail("AWS_ENDPOINT_URL unset in CI: scripts/test.sh must start the S3 server")
        pytest.skip("no S3 server: run through scripts/test.sh")
    gcs, dash, agent, client = free_ports(4)
    env = {**os.environ,
           "TRAPPM_RAY_DIR": str(tmp_path_factory.mktemp("ray-head")),
           "TRAPPM_RAY_PORT": str(gcs), "TRAPPM_DASHBOARD_PORT": str(dash),
           "TRAPPM_AGENT_PORT": str(agent), "TRAPPM_CLIENT_PORT": str(client),
           "TRAPPM_RAY_CPUS": "2",
           # Ray's memory monitor kills workers when the *host* nears full memory; on a shared
           # test box that is other people's processes, and it took this head's trainer.
           "RAY_memory_monitor_refresh_ms": "0"}
    for var in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    try:
        # A loaded 1-core host needs minutes for the dashboard and its agent to come up.
        started = subprocess.run(["bash", str(HEAD), "start"], env=env, capture_output=True,
                                 text=True, timeout=900)
        assert started.returncode == 0, started.stdout + started.stderr
        exports = subprocess.run(["bash", str(HEAD), "env"], env=env, capture_output=True,
                                 text=True, check=True).stdout
        for line in exports.splitlines():
            if line.startswith("unset "):
                env.pop(line.split()[1], None)
            else:
                key, _, value = line.removeprefix("export ").partition("=")
                env[key] = value
        env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
        yield env
    finally:
        subprocess.run(["bash", str(HEAD), "stop"], env=env, capture_output=True, timeout=120)


def submit(env: dict, cmd: str, extra: list[str], timeout: int = 1200) -> str:
    """Run one README `ray job submit` command (plus ``extra`` job flags); returns its output."""
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", f"{cmd} {shlex.join(extra)}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "' succeeded" in out, f"{cmd}\n{out[-6000:]}"
    print(f"{time.monotonic() - t0:6.0f} s  {cmd[:100]}")
    return out


def _last_json(out: str) -> dict:
    """The job's JSON summary: the last top-level {...} block it printed."""
    start = out.rindex("\n{")
    end = out.index("\n}", start) + 2
    return json.loads(out[start:end])


def serve_until_running(env: dict, cmd: str, timeout: float = 900) -> str:
    """Run a README `serve ...` line; after `serve deploy`, wait for every app to be RUNNING."""
    run = lambda c: subprocess.run(["bash", "-c", c], cwd=ROOT, env=env,  # noqa: E731
                                   capture_output=True, text=True, timeout=300)
    proc = run(cmd)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}{proc.stderr}"
    if not cmd.startswith("serve deploy"):
        return proc.stdout
    deadline = time.monotonic() + timeout
    while True:
        status = run("serve status").stdout
        apps = re.findall(r"^  \S+:\n    status: (\w+)", status, re.M)
        if apps and all(a == "RUNNING" for a in apps):
            return status
        assert "DEPLOY_FAILED" not in status and time.monotonic() < deadline, status
        time.sleep(5)


@pytest.mark.slow
def test_cluster_journey_on_local_head(head, s3_prefix):
    from trappm_ray import storage

    env = {**head, "STORE": s3_prefix, "NEW_DEVICE": "intel-r-xeon-r-processor-t1"}
    for cmd in readme_journey():
        if kind(cmd) == "setup":
            continue
        if kind(cmd) == "serve":
            # Until the package ships its default predictor (predict.yaml's `predictor:`).
            if (ROOT / "trappm_ray/predictors/default/manifest.json").exists():
                serve_until_running(env, cmd)
            continue
        job, _ = job_of(cmd)
        assert job in TINY, f"{job}: add its tiny flags to TINY in {__file__}"
        out = submit(env, cmd, TINY[job])
        if job == "jobs/build_dataset.py":
            summary = _last_json(out)
            assert summary["graphs"] == 2 and not summary["failed"], summary
            assert storage.exists(storage.join(s3_prefix, "corpus", "dataset.json"))
        elif job == "jobs/collect_labels.py":
            summary = _last_json(out)
            assert summary["sweeps_finished"] == 1 and not summary["sweeps_failed"], summary
        elif job == "jobs/pretrain_gae.py":
            result = _last_json(out)
            assert result["epoch"] == 1 and result["encoder"].startswith(s3_prefix), result
            assert storage.exists(result["encoder"])
        elif job == "jobs/train_regressors.py":
            result = _last_json(out)
            assert result["uri"].startswith(f"{s3_prefix}/predictors/"), result
            env["PREDICTOR"] = result["uri"]  # what the README tells users to set
        elif job == "jobs/finetune_predictor.py":
            result = _last_json(out)
            assert result["uri"].startswith(f"{s3_prefix}/predictors/"), result
            assert result["source"]["source"] == env["PREDICTOR"], result
        elif job == "jobs/batch_predict.py":
            summary = _last_json(out)  # the corpus's one skeleton, predicted
            assert (summary["files"], summary["ok"], summary["errors"]) == (1, 1, 0), summary
            assert summary["dst"].startswith(s3_prefix), summary
