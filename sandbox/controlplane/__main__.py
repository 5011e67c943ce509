"""``python -m sandbox.controlplane``: start a control plane (with controller-manager and scheduler unless
``--no-controllers``), print its admin kubeconfig and the matching kubectl, keep it until Ctrl-C or SIGTERM.
``--check``: only find the binaries (filling the cache once), print where they are, exit 1 with how to get them when
they cannot be found (.ci/run runs it before the tests)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from sandbox.controlplane import BinariesNotFound, ControlPlane, ControlPlaneError
from sandbox.controlplane.binaries import find_binaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.controlplane", description=__doc__)
    parser.add_argument("--no-controllers", action="store_true", help="etcd and kube-apiserver only")
    parser.add_argument("--check", action="store_true", help="find the binaries, print where they are, and exit")
    args = parser.parse_args(argv)
    if args.check:
        return _check()
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    plane = ControlPlane(controllers=not args.no_controllers, log=lambda m: print(m, file=sys.stderr, flush=True))
    try:
        plane.start()
    except (BinariesNotFound, ControlPlaneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        kubectl = plane.binaries.kubectl
        print(f"kubeconfig: {plane.kubeconfig}")
        print(f"  export KUBECONFIG={plane.kubeconfig}")
        if kubectl is not None:
            print(f"  {kubectl} get nodes,pods -A   (a kubectl of the server's version)")
        print(f"url: {plane.url}")
        print("pids: " + " ".join(f"{name}={child.pid}" for name, child in plane.processes.items()))
        print("ports: " + " ".join(f"{name}={port}" for name, port in plane.ports.items()))
        print("Ctrl-C to stop.", flush=True)
        while not done.wait(1.0):
            for child in plane.processes.values():
                if not child.running():
                    print(f"error: {child.name} exited; its log:\n{child.tail()}", file=sys.stderr)
                    return 1
    finally:
        plane.stop()
    print("stopped", flush=True)
    return 0


def _check() -> int:
    try:
        found = find_binaries(log=lambda m: print(m, file=sys.stderr, flush=True))
        for name in ("kube-controller-manager", "kube-scheduler"):
            found.path(name)
    except BinariesNotFound as exc:
        print(f"error: the tests and the demo need a Kubernetes control plane's binaries: {exc}", file=sys.stderr)
        return 1
    versions = f" ({found.versions})" if found.versions else ""
    print(f"Kubernetes binaries{versions} from {found.source}:")
    for name, path in sorted(found.paths.items()):
        print(f"  {name:<24} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
