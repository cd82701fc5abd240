#!/usr/bin/env python3
"""Two hosts on one machine (suite 'ranks'): two network namespaces joined by a veth pair,
`tandem serve` (rank 0) in one and `tandem worker` (rank 1) in the other, their Gloo
connections over the veth link only, one completion served end to end from the
worker's side of the link.

usage: netns_e2e.py TANDEM_EXE

Needs root (CI runs as root): exits 77 (skipped) with the reason when `ip netns add` is not
permitted. Every wait is bounded; the namespaces are removed whatever happens.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
PIPELINE = str(ROOT / "pipelines/glm-tiny-2rank-cpu.yaml")
TAG = f"td{os.getpid() % 100000}"
NS0, NS1 = f"{TAG}s", f"{TAG}w"           # the server's and the worker's namespaces
IP0, IP1 = "10.213.77.1", "10.213.77.2"
RENDEZVOUS, HTTP = 29611, 18080


def sh(*cmd, timeout=20, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=check)


def make_hosts():
    """The two namespaces and the link; returns a reason string when not permitted."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    r = sh("ip", "netns", "add", NS0, check=False)
    if r.returncode != 0:
        return f"`ip netns add` is not permitted here: {r.stderr.strip()}"
    sh("ip", "netns", "add", NS1)
    sh("ip", "link", "add", f"{TAG}a", "type", "veth", "peer", "name", f"{TAG}b")
    for ns, dev, ip in ((NS0, f"{TAG}a", IP0), (NS1, f"{TAG}b", IP1)):
        sh("ip", "link", "set", dev, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    return None


def remove_hosts():
    for ns in (NS0, NS1):  # the veth pair goes with its namespaces
        if os.path.exists(f"/run/netns/{ns}"):
            sh("ip", "netns", "del", ns, check=False)


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


CLIENT = """
import json, sys, time, urllib.request
base = sys.argv[1]
deadline = time.time() + 120
while True:
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except Exception as e:
        if time.time() > deadline:
            sys.exit("the server never became healthy: %s" % e)
        time.sleep(0.5)
body = json.dumps({"prompt": "Hello", "max_tokens": 8, "ignore_eos": True}).encode()
req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as r:
    print(r.read().decode())
"""


class TwoHosts(unittest.TestCase):
    def test_a_request_served_across_the_veth_link(self):
        common = ["--pipeline", PIPELINE, "--set", "backend.threads=1", "--set", "engine.kv_tokens=4096",
                  "--set", f"transport.rendezvous={IP0}:{RENDEZVOUS}", "--set", "transport.timeout_s=20",
                  "--set", "topology.heartbeat_s=1"]
        server = subprocess.Popen(in_ns(NS0, TANDEM, "serve", *common, "--set", f"transport.host={IP0}",
                                        "--set", f"server.host={IP0}", "--port", str(HTTP)),
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        worker = subprocess.Popen(in_ns(NS1, TANDEM, "worker", *common, "--rank", "1", "--set", f"transport.host={IP1}"),
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # The client runs on the worker's host: the HTTP request crosses the link too.
            client = subprocess.run(in_ns(NS1, sys.executable, "-c", CLIENT, f"http://{IP0}:{HTTP}"),
                                    capture_output=True, text=True, timeout=200)
            self.assertEqual(client.returncode, 0, client.stderr)
            reply = json.loads(client.stdout)
            self.assertEqual(reply["object"], "text_completion")
            self.assertEqual(reply["usage"]["completion_tokens"], 8)
        finally:
            server.terminate()
            try:
                _, server_err = server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                _, server_err = server.communicate()
            try:
                _, worker_err = worker.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                _, worker_err = worker.communicate()
        self.assertEqual(worker.returncode, 0, worker_err)  # rank 0 told it to stop
        self.assertIn("tensor parallel rank 1 of 2", worker_err)


if __name__ == "__main__":
    try:
        why = make_hosts()
    except (OSError, subprocess.SubprocessError) as e:
        remove_hosts()
        sys.exit(f"could not make the two hosts: {e}")
    if why:
        if shutil.which("ip"):
            remove_hosts()
        print(f"skipped: {why}")
        sys.exit(77)
    try:
        result = unittest.main(argv=sys.argv[:1], verbosity=2, exit=False).result
    finally:
        remove_hosts()
    sys.exit(0 if result.wasSuccessful() else 1)
