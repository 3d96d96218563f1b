#!/usr/bin/env bash
# Run the test suite against a real S3-compatible server (Ceph radosgw on 127.0.0.1).
#   scripts/test.sh            default suite (slow tests excluded)
#   scripts/test.sh -m slow    only the slow ones; any other pytest arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if bash scripts/s3_server.sh status >/dev/null 2>&1; then
  echo "S3 server already running: using it, leaving it running"
else
  bash scripts/s3_server.sh start
  trap 'bash scripts/s3_server.sh stop >/dev/null 2>&1 || true' EXIT  # only what we started
fi
eval "$(bash scripts/s3_server.sh env)"
.venv/bin/mypy  # the modules pyproject.toml's [tool.mypy] lists
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(-m "not slow")
.venv/bin/python -m pytest -q "${args[@]}"
