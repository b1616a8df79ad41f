"""The multi-host drill (devtools/drill): hosts as network namespaces, a Redis Cluster with
replicas, two web hosts, a worker, beat, PostgreSQL, a broker and a cache on their own
addresses. The short drill 1 (web-a loses the Redis Cluster for 10 s mid-sale) runs in
full and its checker's verdicts must all pass; an interrupted run and a crashed one leave
nothing behind. Each test uses a drill instance of its own (names sdk<N>-…, addresses
198.18.<N>.0/24)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from devtools.drill import net

from ..helpers import BASE_DIR, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(net.available()), reason=f"network namespaces unavailable: {net.available()}"),
]


def _drill(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "devtools.drill", *args],
        cwd=BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )


def _leftovers(instance: int) -> list[str]:
    return net.namespaces(instance) + net.links(instance)


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def test_short_partition_drill_every_verdict_passes(tmp_path):
    run_dir = tmp_path / "run"
    drill = _drill("--drills", "1", "--short", "--instance", "1", "--run-dir", str(run_dir))
    try:
        output, _ = drill.communicate(timeout=300)
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
    verdicts = json.loads((run_dir / "verdicts.json").read_text())
    (outcome,) = verdicts["outcomes"]
    failed = [v for v in outcome["verdicts"] if not v["ok"]]
    assert not failed, f"{failed}\n{output[-4000:]}"
    assert drill.returncode == 0, output[-4000:]
    names = {v["name"] for v in outcome["verdicts"]}
    assert {"no oversell", "one live order per shopper", "every 202 ends as an order or a failure",
            "no unit returned twice", "reconciliation identities", "anomalies explained by the fault",
            "no 5xx but 503 busy"} <= names  # fmt: skip
    figures = outcome["figures"]
    # Redis's 147 units sold (through web-b, and web-a once healed), and what web-a's
    # breaker sold of the 3-unit database reserve while it was cut off; each unit to one
    # shopper who got a 202.
    assert figures["orders"] == figures["live_units"] == figures["accepted"], figures
    assert 147 <= figures["orders"] <= 150, figures
    assert "| **verdict** | **pass** |" in verdicts["table"]
    # The fault was there: web-a answered busy while it could not reach the cluster.
    assert figures["answers"].get("503", 0) > 0, figures
    assert verdicts["hosts_with_a_route_out"] == []
    # The base latency was added, by netem or, where the kernel has none, by the relays.
    assert verdicts["latency_ms"] == 0.25 and verdicts["latency_by"] in {"netem", "relay"}, verdicts
    assert all(a.startswith("198.18.1.") for a in verdicts["addresses"].values()), verdicts["addresses"]
    assert not _leftovers(1), "the drill left namespaces or links"
    assert not _processes_mentioning(str(run_dir)), "the drill left processes running"


def test_interrupted_drill_removes_every_namespace_and_process(tmp_path):
    run_dir = tmp_path / "run"
    drill = _drill("--drills", "1", "--short", "--instance", "2", "--run-dir", str(run_dir))
    try:
        wait_until(lambda: (run_dir / "redis-6.log").exists() or drill.poll() is not None, timeout=120,
                   what="the cluster's nodes to start")  # fmt: skip
        assert drill.poll() is None, drill.stdout.read() if drill.stdout else ""
        assert net.namespaces(2)
        os.killpg(drill.pid, signal.SIGINT)  # Ctrl-C
        drill.wait(90)
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
    assert drill.returncode != 0
    assert not _leftovers(2), _leftovers(2)
    wait_until(lambda: not _processes_mentioning(str(run_dir)), timeout=30, what="the drill's processes to exit")


def test_a_crashed_runs_leftovers_are_removed_first(tmp_path):
    # What a SIGKILLed drill leaves: a namespace with a process in it, and a link.
    subprocess.run(["ip", "netns", "add", "sdk3-web-a"], check=True)
    subprocess.run(["ip", "link", "add", "sdk3v0", "type", "veth", "peer", "name", "sdk3v0p"], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", "sdk3-web-a", "sleep", "600"], start_new_session=True)
    try:
        wait_until(lambda: subprocess.run(["ip", "netns", "pids", "sdk3-web-a"], capture_output=True, text=True).stdout,
                   timeout=10, what="the process inside the namespace")  # fmt: skip
        drill = _drill("--clean", "--instance", "3")
        output, _ = drill.communicate(timeout=60)
        assert drill.returncode == 0, output
        assert "sdk3-web-a" in output
        assert not _leftovers(3), _leftovers(3)
        assert sleeper.wait(10) == -signal.SIGKILL
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        net.cleanup(3)
