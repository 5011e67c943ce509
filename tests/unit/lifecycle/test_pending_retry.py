"""The follow-up run for pods a provisioner run placed but kube-scheduler has not bound: when, for whom, and when the
chain stops (lifecycle.provisioner.pending_retry / retry_attempt)."""

from __future__ import annotations

from nodeflow.lifecycle.provisioner import (
    PENDING_RETRY_ATTEMPTS,
    PENDING_RETRY_SECONDS,
    PENDING_RETRY_TYPE,
    pending_retry,
    retry_attempt,
)
from nodeflow.scheduling.types import SchedulingResult, UnschedulablePod


def result(*unschedulable: str) -> SchedulingResult:
    return SchedulingResult((), (), tuple(UnschedulablePod(p, {"default": "no room"}) for p in unschedulable))


def test_only_placed_pending_pods_are_retried() -> None:
    retry = pending_retry(["a/x", "a/y", "a/z"], result("a/y"), attempt=0, created=True)
    assert retry is not None
    assert (retry.delay_seconds, retry.pods, retry.placed, retry.attempt) == (
        PENDING_RETRY_SECONDS,
        ("a/x", "a/z"),
        2,
        1,
    )
    assert retry.message()["detail-type"] == PENDING_RETRY_TYPE
    assert retry.message()["detail"] == {"attempt": 1, "pods": ["a/x", "a/z"], "placedPods": 2}
    assert pending_retry(["a/y"], result("a/y"), attempt=0, created=False) is None
    assert pending_retry([], result(), attempt=0, created=False) is None


def test_the_attempt_counts_runs_that_created_nothing_and_a_run_that_created_a_nodeclaim_starts_over() -> None:
    nothing = pending_retry(["a/x"], result(), attempt=3, created=False)
    assert nothing is not None
    assert nothing.attempt == 4
    created = pending_retry(["a/x"], result(), attempt=PENDING_RETRY_ATTEMPTS, created=True)
    assert created is not None
    assert created.attempt == 1
    assert pending_retry(["a/x"], result(), attempt=PENDING_RETRY_ATTEMPTS - 1, created=False) is not None
    assert pending_retry(["a/x"], result(), attempt=PENDING_RETRY_ATTEMPTS, created=False) is None


def test_a_batchs_attempt_is_its_highest_retry_message_and_zero_without_one() -> None:
    pod_event = {"detail-type": "PodUnschedulable", "detail": {"attempt": 9}}
    assert retry_attempt([pod_event]) == 0
    retries = [{"detail-type": PENDING_RETRY_TYPE, "detail": {"attempt": n}} for n in (2, 5)]
    assert retry_attempt([pod_event, *retries]) == 5
    assert retry_attempt([{"detail-type": PENDING_RETRY_TYPE, "detail": "garbled"}]) == 0
    garbled = [{"detail-type": PENDING_RETRY_TYPE, "detail": {"attempt": a}} for a in ("x", [3], True, -4, None, 2.5)]
    assert retry_attempt(garbled) == 0  # counted as none, never an exception that fails the batch
