#!/usr/bin/env python3
"""Runs the end-to-end HTTP tests (pytest) with the venv's Python.

meson's 'e2e' suite calls this. The Python is $TANDEM_PYTHON, else .venv/bin/python in the
source root (make it with: python3 -m venv .venv && .venv/bin/pip install -r
tools/requirements-e2e.txt). Exit 77 (meson: SKIP) when it lacks the openai package.
"""
import os
import subprocess
import sys
from pathlib import Path

root = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
python = os.environ.get("TANDEM_PYTHON") or str(root / ".venv" / "bin" / "python")
if not Path(python).exists():
    print(f"skip: no Python at {python} (set TANDEM_PYTHON or create .venv)")
    sys.exit(77)
if subprocess.run([python, "-c", "import openai, httpx, pytest, prometheus_client"]).returncode != 0:
    print(f"skip: {python} lacks the packages of tools/requirements-e2e.txt")
    sys.exit(77)
sys.exit(subprocess.run([python, "-m", "pytest", "-q", "-x", str(root / "tests" / "e2e_py")] + sys.argv[1:]).returncode)
