#!/usr/bin/env python3
"""Runs one of the structured-output pytest files with a Python that has its packages.

The Python is $TANDEM_GRAMMAR_PYTHON, else $TANDEM_PYTHON, else .venv/bin/python in the source
root. test_structured_output.py needs tools/requirements-e2e.txt and
tools/requirements-grammar.txt (jsonschema); test_mask_crosscheck.py also needs the xgrammar
package (tools/grammar-crosscheck-requirements.txt: it pulls torch, so it is not in .venv by
default). Exit 77 (meson: SKIP) when a package is missing, naming it.
"""
import os
import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
root = Path(os.environ.get("TANDEM_SOURCE_ROOT", here.parents[1]))
python = (os.environ.get("TANDEM_GRAMMAR_PYTHON") or os.environ.get("TANDEM_PYTHON")
          or str(root / ".venv" / "bin" / "python"))
test = sys.argv[1]
needs = {"test_mask_crosscheck.py": ["pytest", "xgrammar", "torch"],
         "test_structured_output.py": ["pytest", "openai", "httpx", "jsonschema"]}[test]
if not Path(python).exists():
    print(f"skip: no Python at {python} (set TANDEM_GRAMMAR_PYTHON or create .venv)")
    sys.exit(77)
for module in needs:
    if subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode != 0:
        print(f"skip: {python} lacks the Python package '{module}' (see the docstring of {__file__})")
        sys.exit(77)
sys.exit(subprocess.run([python, "-m", "pytest", "-q", "-x", str(here / test)] + sys.argv[2:]).returncode)
