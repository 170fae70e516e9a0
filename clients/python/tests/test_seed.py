import os
import subprocess
import sys
from pathlib import Path

from conftest import Server


def test_seed_example(server: Server) -> None:
    seed = Path(__file__).resolve().parent.parent / "examples" / "seed.py"
    out = subprocess.run([sys.executable, str(seed)], env={**os.environ, "TOLLGATE_URL": server.url},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout
    assert lines[0].startswith("user 1 holds title A") and lines[0].endswith("user 2 waits at position 1")
    assert lines[1].startswith("user 3 holds title B")
    assert lines[2].startswith("user 2 holds title A")
