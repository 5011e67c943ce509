"""``make demo KEEP=1``: after the scenario, keep the local cluster up for kubectl until interrupted.

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), the simulated kubelets, the moto
server and the Lambdas on their triggers (SQS event sources, Step Functions, the webhook's Function URL) stay as the
scenario left them; a fresh agent watches the API server again. EventBridge Scheduler's part, which moto never plays,
is played here (``SCHEDULES``): a disruption round and the interruption function's instance-status poll every
minute, garbage collection every 30 s (2 minutes in AWS). So the cluster behaves as a real one with nodeflow
installed: a Deployment scaled up makes pods, kube-scheduler binds those that fit a node and marks the others
Unschedulable, and the agent forwards those to the provisioner; scaled down, its nodes are consolidated.

kubectl gets the cluster admin's kubeconfig (a bearer token in ``system:masters``, TLS with the control plane's own
CA), announced on a line ``KUBECONFIG=<path>``: RBAC, admission, CEL rules, protobuf, watches, events and
impersonation (``auth can-i --as``) are the real API server's. SIGINT or SIGTERM ends the wait (the caller then
tears everything down, the kubeconfig with it).
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any, TextIO

#: seconds between two scheduled invocations of each function (infra/functions.py: schedule_minutes); garbage
#: collection more often than in AWS, so stale nominations are pruned, NodeClaims whose instance is gone deleted, and
#: EC2NodeClass and NodePool status kept current sooner
SCHEDULES: dict[str, float] = {"gc": 30.0, "disruption": 60.0, "interruption": 60.0}
SCHEDULED_EVENT = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}

#: what the demo suggests trying (tests/e2e runs each of them against the kept cluster); ``# yes``/``# no``: the
#: answer of ``auth can-i``
TRY = (
    "kubectl get nodepools,nodeclaims,ec2nodeclasses,nodes",
    "kubectl -n shop scale deploy api --replicas=6",
    "kubectl -n shop rollout status deploy api --timeout=2m",
    "kubectl get events -A",
    "kubectl describe nodepool default",
    "kubectl auth can-i list pods --as=system:serviceaccount:nodeflow:nodeflow-agent  # yes",
    "kubectl auth can-i create nodeclaims --as=system:serviceaccount:nodeflow:nodeflow-agent  # no",
)


def keep_running(local: Any, out: TextIO) -> None:
    """Announce ``KUBECONFIG=<path>`` and block until SIGINT/SIGTERM (must run in the main thread)."""
    from sandbox.agent import AgentProcess

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    agent = AgentProcess(local.agent_env(BATCH_MAX_WAIT="0.1")).start()
    try:
        agent.wait_ready()
        path = local.kube_server.plane.kubeconfig  # the admin's, straight to the API server (TLS)
        print(
            "\nKEEP=1: the cluster stays up (control plane, simulated kubelets, moto, Lambdas on their triggers, "
            "agent); kubectl works as on any cluster, e.g.:\n"
            + "\n".join(f"  {line}" for line in (f"export KUBECONFIG={path}", *TRY))
            + "\nCtrl-C (SIGINT) or SIGTERM stops it.",
            file=out,
        )
        print(f"KUBECONFIG={path}", file=out, flush=True)
        last = dict.fromkeys(SCHEDULES, time.monotonic())
        while not stop.wait(0.5):
            for function, every in SCHEDULES.items():
                if time.monotonic() - last[function] < every:
                    continue
                last[function] = time.monotonic()
                try:
                    local.invoke(function, SCHEDULED_EVENT)
                except Exception as exc:  # the next run tries again; the kept cluster stays up
                    print(f"scheduled {function} failed: {exc}", file=out)
            out.flush()
        print("interrupted: stopping the cluster", file=out, flush=True)
    finally:
        agent.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
