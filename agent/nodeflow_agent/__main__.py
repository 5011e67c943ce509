"""``python -m nodeflow_agent``: watch the cluster, forward compact events to the webhook, until SIGTERM/SIGINT.

On SIGTERM the watchers stop, the buffer is flushed for up to ``FLUSH_TIMEOUT_SECONDS``, and the process exits 0.
Exit status 2: invalid settings (the log names the variable); 1: the health port cannot be bound.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from types import FrameType

from . import __version__
from .auth import CredentialsError, HMACSigner, Signer, SigV4Signer, provider_from_env
from .buffer import Buffer, Item
from .cluster import ClusterMetrics
from .config import Settings, SettingsError
from .health import HealthServer
from .kube import KubeClient
from .log import get_logger, setup_logging
from .metrics import Metrics
from .sender import HTTPTransport, Sender
from .translate import RESOURCES, Event
from .watch import Watcher

log = get_logger("main")


class Agent:
    """The wired agent: watchers -> buffer -> sender, plus the health server."""

    def __init__(self, settings: Settings, env: Mapping[str, str]) -> None:
        self.settings = settings
        self.stopping = threading.Event()
        self.metrics = metrics = Metrics()
        self.buffer = buffer = Buffer(settings.buffer_max_events)
        metrics.gauge("nodeflow_agent_buffer_events", lambda: len(buffer))
        metrics.gauge("nodeflow_agent_buffer_bytes", lambda: buffer.size_bytes)
        metrics.gauge("nodeflow_agent_events_coalesced_total", lambda: buffer.coalesced)
        metrics.gauge("nodeflow_agent_events_dropped_total", lambda: buffer.dropped, reason="overflow")
        metrics.gauge("nodeflow_agent_ready", lambda: 0 if self.readiness() else 1)
        metrics.set("nodeflow_agent_build_info", 1, version=__version__)
        # Karpenter's cluster-state gauges (karpenter_*), LISTed when scraped, at most every CLUSTER_METRICS_SECONDS
        self.cluster_metrics = ClusterMetrics(
            self._kube_client(), min_interval=settings.cluster_metrics_seconds, page_size=settings.list_page_size
        )
        metrics.collector(self.cluster_metrics.render)
        signer: Signer
        if settings.auth_mode == "hmac":
            signer = HMACSigner(settings.hmac_secret_file)
        else:
            provider = provider_from_env(env, settings.aws_region, session_name=settings.agent_name)
            signer = SigV4Signer(provider, settings.signing_region)
        self.watchers = [
            Watcher(
                resource,
                self._kube_client(),
                self.emit,
                metrics,
                resync_seconds=settings.resync_seconds,
                watch_timeout_seconds=settings.watch_timeout_seconds,
                page_size=settings.list_page_size,
                backoff_base=settings.backoff_base_seconds,
                backoff_max=settings.backoff_max_seconds,
            )
            for resource in RESOURCES
        ]
        self.sender = Sender(
            url=settings.webhook_url,
            cluster=settings.cluster_name,
            agent=settings.agent_name,
            buffer=buffer,
            transport=HTTPTransport(settings.webhook_url, settings.request_timeout_seconds),
            signer=signer,
            metrics=metrics,
            batch_max_events=settings.batch_max_events,
            batch_max_bytes=settings.batch_max_bytes,
            batch_max_wait=settings.batch_max_wait,
            backoff_base=settings.backoff_base_seconds,
            backoff_max=settings.backoff_max_seconds,
            on_full_resync=self.full_resync,
        )
        self.health = HealthServer(settings.health_bind, settings.health_port, metrics, self.liveness, self.readiness)

    def _kube_client(self) -> KubeClient:
        s = self.settings
        return KubeClient(
            s.kube_api_url,
            token_file=s.kube_token_file,
            ca_file=s.kube_ca_file,
            insecure=s.kube_insecure,
            timeout=s.request_timeout_seconds,
        )

    def emit(self, events: list[Event], from_list: bool = False) -> None:
        """Watch events never block (a full buffer drops its oldest); LIST events wait for room."""
        wait = (lambda: not self.stopping.is_set()) if from_list else None
        for event in events:
            self.metrics.inc("nodeflow_agent_events_observed_total", kind=event.kind)
            self.buffer.put(Item(event.key, event.id, event.encode()), wait=wait)

    def full_resync(self) -> None:
        for watcher in self.watchers:
            watcher.request_full_resync()

    def liveness(self) -> list[str]:
        threads: list[threading.Thread] = [self.sender, *self.watchers]
        return [f"{t.name}: thread not running" for t in threads if not t.is_alive()]

    def readiness(self) -> list[str]:
        problems = [f"{w.resource.name}: not listed yet" for w in self.watchers if not w.synced.is_set()]
        if not self.sender.healthy(self.settings.ready_failure_seconds):
            problems.append(f"sender: webhook requests failing for over {self.settings.ready_failure_seconds:g}s")
        return problems

    def start(self) -> None:
        self.health.start()
        self.sender.start()
        for watcher in self.watchers:
            watcher.start()

    def shutdown(self) -> bool:
        """Stop watching, flush the buffer within FLUSH_TIMEOUT_SECONDS; True when everything was delivered."""
        self.stopping.set()
        for watcher in self.watchers:
            watcher.stop()
        for watcher in self.watchers:
            watcher.join(2.0)
        flushed = self.sender.flush(self.settings.flush_timeout_seconds)
        self.health.stop()
        return flushed


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    try:
        settings = Settings.from_env(env)
    except SettingsError as e:
        setup_logging()
        log.error("invalid settings", extra={"error": str(e)})
        return 2
    setup_logging(settings.log_level)
    try:
        agent = Agent(settings, env)
    except CredentialsError as e:
        log.error("invalid settings", extra={"error": str(e)})
        return 2
    except OSError as e:
        log.error("cannot start the health server", extra={"error": str(e), "port": settings.health_port})
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal received; shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.start()
    log.info(
        "nodeflow agent started",
        extra={
            "version": __version__,
            "cluster": settings.cluster_name,
            "agent": settings.agent_name,
            "webhook": settings.webhook_url,
            "auth": settings.auth_mode,
            "kube": settings.kube_api_url,
            "health_port": agent.health.port,
        },
    )
    while not stop.wait(1.0):
        pass
    started = time.monotonic()
    flushed = agent.shutdown()
    log.info(
        "stopped",
        extra={
            "flushed": flushed,
            "seconds": round(time.monotonic() - started, 3),
            "sent": agent.metrics.total("nodeflow_agent_events_sent_total"),
            "buffered": len(agent.buffer),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
