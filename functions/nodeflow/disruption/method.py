"""The disruption method protocol, and the round every method reads and reports into. Pure.

A method (Karpenter's ``Method``, ``pkg/controllers/disruption/types.go``) is one way to take nodes away
voluntarily; ``nodeflow.disruption.round`` tries them in order and stops at the first command. Each says:

- which candidates it wants: its ``budget_class``. GRACEFUL methods (emptiness, consolidation) take only
  unblocked candidates; EVENTUAL ones (drift, static drift) also take a node held only by its pods
  (do-not-disrupt, a PodDisruptionBudget) when its NodeClaim has a terminationGracePeriod (``Candidate.eventual_ok``);
- ``should_disrupt(r, c)``: whether it would disrupt that candidate at all (it may report why not: ``Round.block``);
- ``compute(r, wanted)``: its command over the candidates it wants, in the round's order (disruption cost), or
  None. It asks ``r.budgets`` how many nodes of a NodePool it may take, ``r.sim`` where pods would go, and
  ``r.validate`` whether the NodeflowPolicies admit the command;
- ``reason``: the disruption reason its budgets and events name (Empty, Drifted, Underutilized), and
  ``consolidation_type``: the label of its evaluation (``empty``, ``multi``, ``single``; empty for drift).

Forceful disruption is no method (no budget, no blocker, no command), as in Karpenter where other controllers
do it: expiration (``nodeflow.disruption.expiration``), static scale-down (``nodeflow.disruption.static``) and
node repair (``nodeflow.disruption.repair``).

A method must not read the clock (``r.now``), call boto3 or the Kubernetes API, or change the snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from nodeflow.catalog.model import CatalogData
from nodeflow.disruption.budgets import RoundBudgets
from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.model import Blocked, BlockKind, Command, Reason, Settings, Snapshot
from nodeflow.disruption.policy import RoundPolicy
from nodeflow.disruption.simulation import PodInputs, Simulator, on_hold
from nodeflow.plan import build_input
from nodeflow.scheduling.types import SchedulingInput

__all__ = ["BudgetClass", "Method", "Round"]


class BudgetClass(StrEnum):
    """Which blockers hold a method back (Karpenter's disruption classes)."""

    GRACEFUL = "graceful"  # any blocker: do-not-disrupt, PodDisruptionBudgets, the node's own
    EVENTUAL = "eventual"  # pod blockers only without a terminationGracePeriod, which bounds how long they hold


@dataclass(slots=True)
class Round:
    """One round's shared state: the candidates each class of method may take, the budgets left, the blocked
    candidates reported so far (``block``), and, once a method simulates, the cluster as solver input and the
    simulator (``simulate``)."""

    snapshot: Snapshot
    catalog: CatalogData
    now: datetime
    settings: Settings
    unavailable: frozenset[tuple[str, str, str]]
    drift: Callable[[Candidate], str | None]  # why a candidate drifted (``round.Prepared.drift``), or None
    candidates: Sequence[Candidate]  # every candidate, blocked and deleting ones too
    live: Sequence[Candidate]  # not expired, not deleting, not paused by a policy
    policy: RoundPolicy | None
    budgets: RoundBudgets
    blocked: list[Blocked] = field(default_factory=list)
    _base: SchedulingInput | None = None
    _sim: Simulator | None = None
    _rerouting: Simulator | None = None

    def wants(self, budget_class: BudgetClass) -> list[Candidate]:
        """The candidates a method of ``budget_class`` may take (see ``BudgetClass``), in the round's order."""
        if budget_class is BudgetClass.GRACEFUL:
            return [c for c in self.live if c.blocker is None]
        return [c for c in self.live if c.eventual_ok]

    def block(self, node: str, kind: BlockKind, message: str) -> None:
        """Report ``node`` not disrupted, and why (a node's first report is the one kept)."""
        self.blocked.append(Blocked(node, kind, message))

    # -- simulation --------------------------------------------------------------------------------------------
    def simulate(self) -> None:
        """Build the cluster's solver input and the simulator (once; before the first method that simulates)."""
        if self._sim is not None:
            return
        base = build_input(
            self.snapshot.state,
            self.catalog,
            self.settings.preference_policy,
            self.settings.min_values_policy,
            unavailable=self.unavailable,
            now=self.now,
        )
        if base.ceilings or base.group_limits:
            # The policies' ceilings and group limits are checked on each command with its candidates counted as
            # freed (``validate``); a refused command is simulated again with the solver given those that could
            # bind, the candidates counted as freed (``_rerouted``), never as the provisioner counts them.
            base = dataclasses.replace(base, ceilings=(), group_limits=())
        candidates = self.candidates
        bound = [p for c in candidates for p in c.movable]
        self._base = base
        self._sim = Simulator(
            base=base,
            pods=PodInputs(self.snapshot.state, bound),
            held=on_hold(candidates, self.snapshot.last_pod_events, self.now),
            draining={c.name: tuple(p.key for p in c.movable if p.key not in c.held) for c in candidates if c.deleting},
            deny=self.policy.denials([p.name for p in base.nodepools]) if self.policy is not None else None,
        )

    @property
    def base(self) -> SchedulingInput:
        """The whole cluster as solver input (``simulate`` first)."""
        if self._base is None:
            raise RuntimeError("Round.simulate() was not called")
        return self._base

    @property
    def sim(self) -> Simulator:
        """The simulator of this round (``simulate`` first)."""
        if self._sim is None:
            raise RuntimeError("Round.simulate() was not called")
        return self._sim

    # -- validation --------------------------------------------------------------------------------------------
    def validate(
        self,
        command: Command,
        candidates: Sequence[Candidate],
        redo: Callable[[Simulator], Command | str] | None = None,
    ) -> Command | str:
        """``command`` when the policies admit its replacements (no ceiling or group limit crossed, the candidates
        counted as freed); else, with ``redo`` (the method's command from another simulator), the command redone
        with the solver given the ceilings and limits that could bind, when they admit that one; else why not."""
        why = self._refused(command, candidates)
        if why is None:
            return command
        again = self._rerouted() if redo is not None else None
        if redo is not None and again is not None:  # the replacements as the provisioner would make them
            other = redo(again)
            if isinstance(other, Command) and self._refused(other, candidates) is None:
                return other
        return why

    def _refused(self, command: Command, candidates: Sequence[Candidate]) -> str | None:
        """Why the policies refuse ``command``'s replacements (a ceiling or group limit), or None."""
        if self.policy is None or not command.replacements:
            return None
        sim = self.sim
        return self.policy.check(command, candidates, self.base, lambda key: (sim.requests_of(key) or {}).get("cpu", 0))

    def _rerouted(self) -> Simulator | None:
        """The simulator whose solver is given the ceilings and group limits that could bind (the candidates counted
        as freed), so replacements go to the next NodePool as the provisioner's do; used only for a command the
        policies refused (a decision no ceiling or limit refuses stays as without policies). None: no policy has
        a ceiling or a group limit."""
        policy = self.policy
        if policy is None or not (policy.gov.ceilings or policy.gov.group_limits):
            return None
        if self._rerouting is None:
            base = self.base
            self._rerouting = dataclasses.replace(self.sim, limits=lambda cs, pods: policy.limits(cs, pods, base))
        return self._rerouting


class Method(Protocol):
    """One voluntary disruption method (see the module docstring)."""

    reason: Reason
    budget_class: BudgetClass
    consolidation_type: str
    simulates: bool  # needs ``Round.sim`` / ``Round.base``
    evaluated_without_candidates: bool  # reports an evaluation even when it wants no candidate

    def should_disrupt(self, r: Round, c: Candidate) -> bool: ...

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None: ...
