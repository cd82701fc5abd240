#!/usr/bin/env python3
"""Per-thread CPU time and context switches of a process, summed by thread name, as JSON.

    thread_snapshot.py PID > before.json; ...; thread_snapshot.py PID > after.json
    thread_snapshot.py --diff before.json after.json TOKENS   # per streamed token

The server names its threads (tandem-engine, tandem-relay, tandem-io), so the cost of the
HTTP path shows apart from the model's. Context switches count wake-ups: a voluntary one is a
thread going to sleep (and later woken), an involuntary one a thread preempted — on a busy
machine mostly by a thread that was just woken.
"""
import json
import os
import sys


def snapshot(pid):
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / hz
        sw = {k: int(v) for k, v in (l.split(":") for l in status.splitlines() if l.endswith(tuple("0123456789"))
                                     and l.split(":")[0] in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))}
        t = out.setdefault(name, {"cpu_s": 0.0, "vol": 0, "invol": 0, "threads": 0})
        t["cpu_s"] += cpu
        t["vol"] += sw.get("voluntary_ctxt_switches", 0)
        t["invol"] += sw.get("nonvoluntary_ctxt_switches", 0)
        t["threads"] += 1
    return out


def diff(a, b, tokens):
    print(f"{'thread':<16}{'CPU us/token':>14}{'sleeps/token':>14}{'preempted/token':>17}")
    for name in sorted(b):
        x, y = a.get(name, {"cpu_s": 0, "vol": 0, "invol": 0}), b[name]
        print(f"{name:<16}{1e6 * (y['cpu_s'] - x['cpu_s']) / tokens:>14.1f}{(y['vol'] - x['vol']) / tokens:>14.3f}"
              f"{(y['invol'] - x['invol']) / tokens:>17.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        diff(json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4]))
    else:
        json.dump(snapshot(int(sys.argv[1])), sys.stdout)
