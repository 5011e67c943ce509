"""Faults moto cannot produce by itself: EC2 capacity errors per (instance type, zone[, capacity type]), EC2
throttling, and Lambda handlers that fail a given number of times.

``Ec2Faults`` wraps moto's CreateFleet response handler (it runs wherever moto runs: in-process
under ``mock_aws`` or inside a ThreadedMotoServer of this process). Overrides whose (type, zone)
is out of capacity are removed from the request and reported in ``Errors`` with
``InsufficientInstanceCapacity``, as EC2 does for an instant fleet; if none is left no instance
is launched.

It also applies EC2's ClientToken rules, which moto ignores: a CreateFleet with a token seen before
and the same request gets the first answer again (no new instance; the answer of a call that found
no capacity is replayed too, as EC2 created that fleet), and the same token with a different request
fails with ``IdempotentParameterMismatch``. A throttled call records nothing. It tags the instances it launches
``aws:ec2launchtemplate:id`` / ``-version`` as EC2 does (moto's fleet path does not).

``deny(operation)`` makes CreateFleet, RunInstances or CreateLaunchTemplate answer ``UnauthorizedOperation`` (dry
run or not) as EC2 does when the caller's IAM policy does not allow the call, until ``allow(operation)``; every
dry run of the three is recorded in ``dry_runs`` (operation, answer).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ec2Faults", "flaky"]


@dataclass
class Ec2Faults:
    subnet_zones: Mapping[str, str]  # subnet id -> zone
    out_of_capacity: set[tuple[str, str]] = field(default_factory=set)  # (instance type, zone)
    # (instance type, zone, "spot" | "on-demand"): out of capacity for that capacity type only
    out_of_lifecycle: set[tuple[str, str, str]] = field(default_factory=set)
    throttle_next: int = 0  # the next N CreateFleet calls answer RequestLimitExceeded
    calls: list[dict[str, Any]] = field(default_factory=list)  # every CreateFleet: overrides asked, outcome
    before: Callable[[list[tuple[str, str]]], None] | None = None  # sees each call's (type, zone) overrides first
    tokens: dict[str, tuple[str, Any]] = field(default_factory=dict)  # ClientToken -> (request digest, answer)
    unauthorized: set[str] = field(default_factory=set)  # operations answering UnauthorizedOperation
    dry_runs: list[tuple[str, str]] = field(default_factory=list)  # (operation, answer) of every dry run
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _real: Any = field(default=None, repr=False)
    _real_others: dict[str, Any] = field(default_factory=dict, repr=False)

    def deny(self, *operations: str) -> None:
        """``operations`` (CreateFleet, RunInstances, CreateLaunchTemplate) answer UnauthorizedOperation."""
        unknown = set(operations) - set(_AUTHORIZED_OPERATIONS)
        if unknown:
            raise ValueError(f"Ec2Faults.deny: unknown operation(s) {sorted(unknown)}; one of {_AUTHORIZED_OPERATIONS}")
        with self._lock:
            self.unauthorized.update(operations)

    def allow(self, *operations: str) -> None:
        with self._lock:
            self.unauthorized.difference_update(operations)

    def _authorize(self, operation: str, handler: Any) -> None:
        from moto.ec2.exceptions import EC2ClientError

        dry_run = str(handler._get_param("DryRun", False)).lower() == "true"
        with self._lock:
            denied = operation in self.unauthorized
            if dry_run:
                self.dry_runs.append((operation, "UnauthorizedOperation" if denied else "DryRunOperation"))
        if denied:
            raise EC2ClientError(
                "UnauthorizedOperation",
                f"You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/"
                f"nodeflow/fn is not authorized to perform: ec2:{operation} because no identity-based policy "
                f"allows the ec2:{operation} action.",
            )

    def exhaust(self, pairs: Iterable[tuple[str, str]], lifecycle: str | None = None) -> None:
        """(instance type, zone) pairs out of capacity: for every capacity type, or only ``lifecycle`` ("spot",
        "on-demand")."""
        with self._lock:
            if lifecycle is None:
                self.out_of_capacity.update(pairs)
            else:
                self.out_of_lifecycle.update((t, z, lifecycle) for t, z in pairs)

    def install(self) -> Ec2Faults:
        from moto.ec2.responses.fleets import Fleets

        if self._real is not None:
            return self
        self._real = Fleets.create_fleet
        faults = self

        def create_fleet(handler: Any) -> Any:
            return faults._create_fleet(handler)

        Fleets.create_fleet = create_fleet  # type: ignore[method-assign,assignment]
        for operation, (cls, attr) in _others().items():
            real = self._real_others[operation] = getattr(cls, attr)
            setattr(cls, attr, self._guard(operation, real))
        return self

    def _guard(self, operation: str, real: Any) -> Any:
        faults = self

        def guarded(handler: Any) -> Any:
            faults._authorize(operation, handler)
            return real(handler)

        return guarded

    def uninstall(self) -> None:
        from moto.ec2.responses.fleets import Fleets

        if self._real is not None:
            Fleets.create_fleet = self._real  # type: ignore[method-assign]
            self._real = None
        for operation, (cls, attr) in _others().items():
            real = self._real_others.pop(operation, None)
            if real is not None:
                setattr(cls, attr, real)

    def __enter__(self) -> Ec2Faults:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _create_fleet(self, handler: Any) -> Any:
        from moto.core.responses import ActionResult
        from moto.ec2.exceptions import EC2ClientError

        self._authorize("CreateFleet", handler)
        if str(handler._get_param("DryRun", False)).lower() == "true":
            return self._real(handler)  # moto answers DryRunOperation; no capacity, tokens or hooks
        token = str(handler._get_param("ClientToken") or "")
        digest = _request_digest(handler)
        if token:
            with self._lock:
                known = self.tokens.get(token)
            if known is not None:
                if known[0] != digest:
                    with self._lock:
                        self.calls.append({"overrides": [], "outcome": "idempotent-mismatch", "token": token})
                    raise EC2ClientError(
                        "IdempotentParameterMismatch",
                        f"The client token {token} was already used with different request parameters.",
                    )
                with self._lock:
                    self.calls.append({"overrides": [], "outcome": "replayed", "token": token})
                return ActionResult(known[1])
        result = self._launch(handler, ActionResult, EC2ClientError)
        if token:
            with self._lock:
                self.tokens.setdefault(token, (digest, result.result))
        return result

    def _launch(self, handler: Any, ActionResult: Any, EC2ClientError: Any) -> Any:
        configs = handler._get_param("LaunchTemplateConfigs", []) or []
        asked = [
            (o.get("InstanceType"), self.subnet_zones.get(o.get("SubnetId", ""), o.get("AvailabilityZone")))
            for c in configs
            for o in c.get("Overrides", []) or []
        ]
        spot = handler._get_param("TargetCapacitySpecification", {}).get("DefaultTargetCapacityType") == "spot"
        if self.before is not None:
            self.before(asked)
        with self._lock:
            if self.throttle_next > 0:
                self.throttle_next -= 1
                self.calls.append({"overrides": asked, "outcome": "throttled"})
                raise EC2ClientError("RequestLimitExceeded", "Request limit exceeded.")
            lifecycle = "spot" if spot else "on-demand"
            blocked = set(self.out_of_capacity) | {(t, z) for t, z, c in self.out_of_lifecycle if c == lifecycle}
        errors = []
        kept_configs = []
        for c in configs:
            kept = []
            for o in c.get("Overrides", []) or []:
                zone = self.subnet_zones.get(o.get("SubnetId", ""), o.get("AvailabilityZone"))
                if (o.get("InstanceType"), zone) in blocked:
                    errors.append(
                        {
                            "LaunchTemplateAndOverrides": {
                                "LaunchTemplateSpecification": c.get("LaunchTemplateSpecification", {}),
                                "Overrides": {**o, "AvailabilityZone": zone},
                            },
                            "Lifecycle": "spot" if spot else "on-demand",
                            "ErrorCode": "InsufficientInstanceCapacity",
                            "ErrorMessage": f"There is no {o.get('InstanceType')} capacity in {zone}.",
                        }
                    )
                else:
                    kept.append(o)
            if kept:
                kept_configs.append({**c, "Overrides": kept})
        if not kept_configs:
            with self._lock:
                self.calls.append({"overrides": asked, "outcome": "no-capacity"})
            return ActionResult({"FleetId": "fleet-00000000-0000-0000-0000-000000000000", "Errors": errors})

        real_get = handler._get_param

        def get_param(name: str, if_none: Any = None) -> Any:
            if name == "LaunchTemplateConfigs":
                return kept_configs
            return real_get(name, if_none)

        handler._get_param = get_param
        try:
            result = self._real(handler)
        finally:
            del handler._get_param
        if errors:
            result.result["Errors"] = errors
        _tag_with_templates(handler, result.result)
        launched = [(i.get("InstanceType"), i.get("InstanceIds")) for i in result.result.get("Instances", []) or []]
        with self._lock:
            self.calls.append({"overrides": asked, "outcome": "launched", "instances": launched, "errors": len(errors)})
        return result


def _tag_with_templates(handler: Any, result: Mapping[str, Any]) -> None:
    """EC2 tags every instance launched from a launch template ``aws:ec2launchtemplate:id`` and ``-version``; moto's
    fleet path does not (its RunInstances does)."""
    backend = handler.ec2_backend
    for launched in result.get("Instances", []) or []:
        spec = (launched.get("LaunchTemplateAndOverrides") or {}).get("LaunchTemplateSpecification") or {}
        if not spec.get("LaunchTemplateId"):
            continue
        tags = {
            "aws:ec2launchtemplate:id": spec["LaunchTemplateId"],
            "aws:ec2launchtemplate:version": str(spec.get("Version", 1)),
        }
        for instance_id in launched.get("InstanceIds") or []:
            backend.get_instance(instance_id).add_tags(tags)


_AUTHORIZED_OPERATIONS = ("CreateFleet", "RunInstances", "CreateLaunchTemplate")


def _others() -> dict[str, tuple[Any, str]]:
    """The moto response handlers wrapped besides CreateFleet: operation -> (class, method name)."""
    from moto.ec2.responses.instances import InstanceResponse
    from moto.ec2.responses.launch_templates import LaunchTemplates

    return {
        "RunInstances": (InstanceResponse, "run_instances"),
        "CreateLaunchTemplate": (LaunchTemplates, "create_launch_template"),
    }


def _request_digest(handler: Any) -> str:
    """What EC2 compares for idempotency: every request parameter but the token itself."""
    params = {k: v for k, v in (handler.querystring or {}).items() if k not in ("ClientToken", "Action", "Version")}
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def flaky(
    handler: Callable[[Any, Any], Any],
    times: int = 1,
    error: Callable[[], BaseException] = lambda: RuntimeError("boom"),
) -> Callable[[Any, Any], Any]:
    """``handler`` that raises ``error()`` on its first ``times`` calls."""
    state = {"left": times}
    lock = threading.Lock()

    def wrapped(event: Any, context: Any) -> Any:
        with lock:
            fail = state["left"] > 0
            if fail:
                state["left"] -= 1
        if fail:
            raise error()
        return handler(event, context)

    return wrapped
