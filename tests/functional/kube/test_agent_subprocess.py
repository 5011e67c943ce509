"""An agent-like process (its own interpreter, a kubeconfig, the official typed client) creates
pods while the adapter snapshots the same server."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap
import time
from typing import Any

from nodeflow.kube.connection import api_client_from_kubeconfig
from nodeflow.kube.snapshot import take_snapshot

AGENT = textwrap.dedent(
    """
    import sys
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=sys.argv[1]))
    for i in range(int(sys.argv[2])):
        name = f"agent-pod-{i:03d}"
        api.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "batch"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "250m"}}}]},
        })
        api.patch_namespaced_pod_status(name, "default", {"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/0 nodes"}]}})
    print("done", flush=True)
    """
)


def test_snapshots_while_an_agent_process_creates_pods(server: Any, tmp_path: pathlib.Path) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    count = 60
    proc = subprocess.Popen(
        [sys.executable, str(script), kubeconfig, str(count)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    client = api_client_from_kubeconfig(kubeconfig)
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        snap = take_snapshot(client)
        assert {p.key for p in snap.pending} <= {p.key for p in snap.pods}
        seen.append(len(snap.pods))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == "done"
    final = take_snapshot(client)
    assert len(final.pods) == count
    assert sorted(p.name for p in final.pending) == [f"agent-pod-{i:03d}" for i in range(count)]
    assert seen == sorted(seen)  # the pod count only grew between snapshots
