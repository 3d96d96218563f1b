"""The README's local `trappm-ray` and `python -c` commands, run as written (bundled samples,
shipped predictor), from a scratch directory that sees the repository's `data/`, so that the
sweep's PNG lands there and not in the checkout."""
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def readme_commands() -> list[str]:
    """Lines of the README's bash blocks that call the CLI or the API."""
    text = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith((".venv/bin/trappm-ray ", ".venv/bin/python -c ")):
                lines.append(line)
    return lines


def test_readme_lists_the_local_commands():
    commands = readme_commands()
    assert sum(c.startswith(".venv/bin/trappm-ray predict") for c in commands) >= 3
    assert sum(c.startswith(".venv/bin/trappm-ray graph") for c in commands) >= 1
    assert any(c.startswith(".venv/bin/python -c") for c in commands)


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_as_written(command, tmp_path):
    (tmp_path / "data").symlink_to(ROOT / "data")
    argv = shlex.split(command)
    tool = argv[0].removeprefix(".venv/bin/")
    argv[0] = sys.executable if tool == "python" else str(BIN / tool)
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
    if "--json" in argv:
        out = json.loads(done.stdout)
        assert out.get("model_version") or out.get("nodes")
    if "--sweep" in argv:
        assert list(tmp_path.glob("*.png"))
