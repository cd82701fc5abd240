#!/usr/bin/env python3
"""Runs the fault battery (test_faults.py) under pytest; exit 77 (meson: SKIP) when this
Python lacks what tests/e2e_py's conftest needs (tools/requirements-e2e.txt)."""
import subprocess
import sys
from pathlib import Path

if subprocess.run([sys.executable, "-c", "import openai, httpx, pytest"]).returncode != 0:
    print(f"skip: {sys.executable} lacks the packages of tools/requirements-e2e.txt")
    sys.exit(77)
here = Path(__file__).resolve().parent
sys.exit(subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here / "test_faults.py")]
                        + sys.argv[1:]).returncode)
