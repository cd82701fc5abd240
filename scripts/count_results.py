#!/usr/bin/env python3
"""Prints one closing line `N passed, N failed, N skipped` for every test run recorded in
the given result files (meson's testlog.json; pytest JUnit XML files are added when given).
Exits non-zero when anything failed or nothing ran."""
import json
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for path in sys.argv[1:]:
    if path.endswith(".json"):
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                result = json.loads(line)["result"]
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    elif path.endswith(".xml"):
        for suite in ET.parse(path).getroot().iter("testsuite"):
            tests = int(suite.get("tests", 0))
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            passed += tests - bad - skip
            failed += bad
            skipped += skip

print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
