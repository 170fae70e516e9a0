#!/usr/bin/env bash
# The Python client's checks: mypy --strict, then the tests against a real
# `tollgate serve` (TOLLGATE_BIN, default target/debug/tollgate: build it
# with `cargo build -p tollgate-server` first) and a real redis-server.
# Extra arguments go to pytest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/python-client-venv"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
"${pip[@]}" httpx==0.28.1 pytest==9.2.0 mypy==2.4.1 hatchling==1.33.0 editables==0.6
# The pinned hatchling builds it, rather than whatever PyPI has that day.
"${pip[@]}" --no-build-isolation -e "$here"

cd "$here"
"$venv/bin/mypy" --strict src examples
"$venv/bin/pytest" -q "$@"
