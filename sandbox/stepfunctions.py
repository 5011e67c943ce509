"""Run real ASL against our Python handlers in-process, fast, and see what happened.

moto's Step Functions engine (a port of LocalStack's interpreter) executes state machines when asked
(``mock_aws(config={"stepfunctions": {"execute_state_machine": True}})``). Lambda tasks end in
``moto.awslambda.models.LambdaFunction._invoke_lambda``, which would start a Docker container: ``LambdaDispatch``
replaces it with a call to a Python handler looked up by function name. ``scale_waits`` shrinks Wait states and
Retry intervals. ``execution_trace`` turns the execution history into the console's view.

These patch moto internals; ``check_engine_internals()`` fails loudly when a moto upgrade moves them.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
import traceback
import types
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "ExecutionTrace",
    "Invocation",
    "LambdaContext",
    "LambdaDispatch",
    "StateVisit",
    "TaskAttempt",
    "UnknownFunctionError",
    "check_engine_internals",
    "execution_trace",
    "quiet_engine_logs",
    "scale_waits",
    "stretch_task_timeouts",
    "wait_for_execution",
]

LOG = logging.getLogger(__name__)

Handler = Callable[[Any, Any], Any]

_LAMBDA_MODULE = "moto.awslambda.models"
_WAIT_MODULE = "moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function"
_RETRIER_MODULE = "moto.stepfunctions.parser.asl.component.common.retry.retrier_decl"
_ENV_MODULE = "moto.stepfunctions.parser.asl.eval.environment"
_EXECUTE_STATE_MODULE = "moto.stepfunctions.parser.asl.component.state.exec.execute_state"
_TIMEOUT_MODULE = "moto.stepfunctions.parser.asl.component.common.timeouts.timeout"
_TASK_LAMBDA_MODULES = (
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda",
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_lambda",
)


# =============================================================================================
# Lambda dispatch


class UnknownFunctionError(LookupError):
    """A Lambda function was invoked that has no in-process handler."""


@dataclass
class LambdaContext:
    """The parts of the Lambda runtime's context object our handlers (and Powertools) use."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_seconds: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    client_context: Any = None
    identity: Any = None
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self._deadline:
            self._deadline = time.monotonic() + self.timeout_seconds
        if not self.log_group_name:
            self.log_group_name = f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass(frozen=True)
class Invocation:
    function_name: str
    request_id: str
    started: float  # time.time()
    duration: float  # seconds
    error: str | None  # errorType of a failed invocation, else None
    event: Any = field(default=None, repr=False)
    result: Any = field(default=None, repr=False)


def _normalise_event(event: Any) -> Any:
    """moto passes the payload parsed (dict) or as a JSON string ("{}" for an empty one)."""
    if event is None:
        return {}
    if isinstance(event, bytes | bytearray):
        event = event.decode("utf-8")
    if isinstance(event, str):
        if not event.strip():
            return {}
        try:
            return json.loads(event)
        except ValueError:
            return event
    return event


def _error_payload(exc: BaseException) -> str:
    return json.dumps(
        {
            "errorType": type(exc).__name__,
            "errorMessage": str(exc),
            # Like the runtime's: the handler's frames (ours, the dispatcher's, left out), innermost last.
            "stackTrace": traceback.format_tb(exc.__traceback__.tb_next if exc.__traceback__ else None)[-5:],
        }
    )


class LambdaDispatch:
    """Route moto Lambda invocations to in-process handlers: ``{function name: handler(event, context)}``.

    Use as a context manager or ``install()``/``uninstall()``. Returns moto's ``(payload, is_error, log)``:
    a handler's result as JSON, or for an exception ``{"errorType": <class name>, "errorMessage": ...}`` with
    is_error set — the Step Functions engine uses ``errorType`` as the error name Retry/Catch match on.
    Every invocation is recorded (thread-safe): ``invocations``, ``count()``.

    ``invocation_context(function_name)``, when set, returns a context manager the handler runs in: what a
    function's runtime knows that the process does not, e.g. its identity towards the Kubernetes API (the
    sandbox makes each handler's requests impersonate its function's RBAC groups). It is entered in the
    invoking thread; threads the handler starts see it only if they copy the context
    (``contextvars.copy_context().run``).
    """

    _active: LambdaDispatch | None = None
    _install_lock = threading.Lock()

    def __init__(
        self,
        handlers: Mapping[str, Handler] | None = None,
        invocation_context: Callable[[str], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.handlers: dict[str, Handler] = dict(handlers or {})
        self.invocation_context = invocation_context
        self._lock = threading.Lock()
        self._invocations: list[Invocation] = []
        self.unknown: list[str] = []  # names invoked without a handler
        self._original: Any = None

    # --- registry ---------------------------------------------------------------------------

    def register(self, function_name: str, handler: Handler) -> None:
        with self._lock:
            self.handlers[function_name] = handler

    def __setitem__(self, function_name: str, handler: Handler) -> None:
        self.register(function_name, handler)

    # --- install ----------------------------------------------------------------------------

    def install(self) -> LambdaDispatch:
        from moto.awslambda.models import LambdaFunction

        with LambdaDispatch._install_lock:
            if LambdaDispatch._active is not None:
                raise RuntimeError("a LambdaDispatch is already installed; uninstall it first")
            self._original = LambdaFunction.__dict__["_invoke_lambda"]
            dispatch = self

            def _invoke_lambda(fn: Any, event: Any = None) -> tuple[str, bool, str]:
                return dispatch.invoke(fn, event)

            _invoke_lambda.__sandbox_dispatch__ = True  # type: ignore[attr-defined]
            LambdaFunction._invoke_lambda = _invoke_lambda  # type: ignore[method-assign,assignment]
            LambdaDispatch._active = self
        return self

    def uninstall(self) -> None:
        from moto.awslambda.models import LambdaFunction

        with LambdaDispatch._install_lock:
            if LambdaDispatch._active is not self:
                return
            LambdaFunction._invoke_lambda = self._original  # type: ignore[method-assign]
            self._original = None
            LambdaDispatch._active = None

    def __enter__(self) -> LambdaDispatch:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # --- invocation -------------------------------------------------------------------------

    def invoke(self, fn: Any, event: Any) -> tuple[str, bool, str]:
        """Run the handler for moto ``LambdaFunction`` ``fn``; moto's ``(payload, is_error, log)``."""
        name: str = fn.function_name
        with self._lock:
            handler = self.handlers.get(name)
        if handler is None:
            with self._lock:
                self.unknown.append(name)
            known = ", ".join(sorted(self.handlers)) or "none"
            raise UnknownFunctionError(f"no in-process handler for Lambda function {name!r} (known: {known})")
        context = LambdaContext(
            function_name=name,
            invoked_function_arn=str(getattr(fn, "function_arn", "")),
            memory_limit_in_mb=int(getattr(fn, "memory_size", 128) or 128),
            timeout_seconds=float(getattr(fn, "timeout", 3) or 3),
        )
        payload = _normalise_event(event)
        started, t0 = time.time(), time.perf_counter()
        error: str | None = None
        result: Any = None
        around = self.invocation_context
        try:
            with around(name) if around is not None else nullcontext():
                result = handler(payload, context)
            try:
                body = json.dumps(result)
            except (TypeError, ValueError) as exc:
                error = "Runtime.MarshalError"
                body = json.dumps(
                    {"errorType": error, "errorMessage": f"Unable to marshal response: {exc}", "stackTrace": []}
                )
        except Exception as exc:
            error = type(exc).__name__
            body = _error_payload(exc)
        duration = time.perf_counter() - t0
        with self._lock:
            self._invocations.append(
                Invocation(name, context.aws_request_id, started, duration, error, event=payload, result=result)
            )
        log = (
            f"START RequestId: {context.aws_request_id} Version: $LATEST\n"
            f"END RequestId: {context.aws_request_id}\n"
            f"REPORT RequestId: {context.aws_request_id}\tDuration: {duration * 1000:.2f} ms\n"
        )
        return body, error is not None, log

    # --- records ----------------------------------------------------------------------------

    @property
    def invocations(self) -> list[Invocation]:
        with self._lock:
            return list(self._invocations)

    def count(self, function_name: str | None = None, *, errors: bool | None = None) -> int:
        """Invocations (of one function, and only failed/successful ones when ``errors`` is set)."""
        return sum(
            1
            for i in self.invocations
            if (function_name is None or i.function_name == function_name)
            and (errors is None or (i.error is not None) == errors)
        )

    def clear(self) -> None:
        with self._lock:
            self._invocations.clear()
            self.unknown.clear()


# =============================================================================================
# scaled waits


class _ScaledTime(types.ModuleType):
    """Stands in for the ``time`` module inside moto's retrier: ``sleep`` scaled, the rest delegated."""

    def __init__(self, factor: float) -> None:
        super().__init__("time")
        self.factor = factor

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds * self.factor))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def scale_waits(factor: float) -> Iterator[None]:
    """Scale Wait states and Retry intervals by ``factor`` (0.01: a 30 s Wait takes 0.3 s). Restored on exit."""
    if factor < 0:
        raise ValueError("factor must be >= 0")
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    original_wait = WaitFunction.__dict__["_wait_interval"]
    original_time = retrier_decl.__dict__["time"]

    def _wait_interval(self: Any, env: Any, wait_seconds: float) -> None:
        # Same contract as moto's: wait, return early once the execution stops running.
        deadline = time.monotonic() + max(0.0, float(wait_seconds)) * factor
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            env.program_state_event.wait(remaining)
            if not env.is_running():
                return

    WaitFunction._wait_interval = _wait_interval  # type: ignore[method-assign]
    retrier_decl.time = _ScaledTime(factor)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        WaitFunction._wait_interval = original_wait  # type: ignore[method-assign]
        retrier_decl.time = original_time  # type: ignore[attr-defined]


_stretch = threading.local()


@contextmanager
def stretch_task_timeouts(factor: float) -> Iterator[None]:
    """Give every Task (and Map, Parallel) ``factor`` times its ``TimeoutSeconds`` before the engine fails it with
    ``States.Timeout``. Restored on exit.

    In the sandbox every Lambda invocation shares one interpreter lock with all the others, the engine and the
    simulated kubelets; at a burst of a few hundred launch workflows a handler that needs 50 ms of CPU waits seconds
    for its turn, so a timeout meant for a function with a CPU of its own fires on the harness's queueing, not on the
    function (issue 27: 123 of 223 launches cleaned up after ``States.Timeout``). The execution history still says
    the state's own ``timeoutInSeconds``; read the tasks' durations from it to see which would have passed it."""
    if factor < 1:
        raise ValueError("factor must be >= 1")
    from moto.stepfunctions.parser.asl.component.common.timeouts.timeout import Timeout
    from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState

    original_eval = Timeout.__dict__["_eval_body"]
    original_with_timeout = ExecutionState.__dict__["_evaluate_with_timeout"]

    def _eval_body(self: Any, env: Any) -> None:
        seconds = self._eval_seconds(env=env)
        if getattr(_stretch, "armed", False):  # the wait of _evaluate_with_timeout, on this thread, once
            _stretch.armed = False
            seconds = int(seconds * factor)
        env.stack.append(seconds)

    def _evaluate_with_timeout(self: Any, env: Any) -> None:
        _stretch.armed = True
        try:
            original_with_timeout(self, env)
        finally:
            _stretch.armed = False

    Timeout._eval_body = _eval_body  # type: ignore[method-assign]
    ExecutionState._evaluate_with_timeout = _evaluate_with_timeout  # type: ignore[method-assign]
    try:
        yield
    finally:
        Timeout._eval_body = original_eval  # type: ignore[method-assign]
        ExecutionState._evaluate_with_timeout = original_with_timeout  # type: ignore[method-assign]


@contextmanager
def quiet_engine_logs(level: int = logging.CRITICAL) -> Iterator[None]:
    """Silence the engine's ERROR log line (with the whole state's repr) for every failed task attempt,
    retried and caught ones included. Restored on exit."""
    logger = logging.getLogger("moto.stepfunctions.parser")
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


# =============================================================================================
# engine checks


def check_engine_internals() -> None:
    """Raise RuntimeError if a moto internal that this module patches or relies on has moved or changed."""
    import importlib

    problems: list[str] = []

    def _module(name: str) -> Any:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            problems.append(f"module {name} is gone ({exc})")
            return None

    def _source(obj: Any) -> str:
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            return ""

    lam = _module(_LAMBDA_MODULE)
    if lam is not None:
        cls = getattr(lam, "LambdaFunction", None)
        fn = getattr(cls, "_invoke_lambda", None)
        if fn is None:
            problems.append(f"{_LAMBDA_MODULE}.LambdaFunction._invoke_lambda is gone")
        elif not getattr(fn, "__sandbox_dispatch__", False):
            params = list(inspect.signature(fn).parameters)
            if params != ["self", "event"]:
                problems.append(f"LambdaFunction._invoke_lambda{tuple(params)} no longer takes (self, event)")
        for attr in ("function_name", "function_arn", "memory_size", "timeout"):
            if cls is not None and attr not in _source(cls.__init__):
                problems.append(f"LambdaFunction no longer sets .{attr}")
        if cls is not None and "self._invoke_lambda(" not in _source(getattr(cls, "invoke", None)):
            problems.append("LambdaFunction.invoke no longer goes through _invoke_lambda")

    wait = _module(_WAIT_MODULE)
    if wait is not None:
        wf = getattr(wait, "WaitFunction", None)
        fn = getattr(wf, "_wait_interval", None)
        if fn is None:
            problems.append(f"{_WAIT_MODULE}.WaitFunction._wait_interval is gone")
        elif fn.__module__ == _WAIT_MODULE and list(inspect.signature(fn).parameters) != [
            "self",
            "env",
            "wait_seconds",
        ]:
            problems.append("WaitFunction._wait_interval no longer takes (self, env, wait_seconds)")
        if wf is not None and "self._wait_interval(" not in _source(getattr(wf, "_eval_body", None)):
            problems.append("WaitFunction._eval_body no longer calls _wait_interval")

    env_mod = _module(_ENV_MODULE)
    if env_mod is not None:
        env_cls = getattr(env_mod, "Environment", None)
        if env_cls is None or not callable(getattr(env_cls, "is_running", None)):
            problems.append("Environment.is_running() is gone")
        elif "self.program_state_event" not in _source(env_cls.__init__):
            problems.append("Environment no longer has program_state_event")

    execute = _module(_EXECUTE_STATE_MODULE)
    if execute is not None:
        body = _source(getattr(getattr(execute, "ExecutionState", None), "_evaluate_with_timeout", None))
        if body and "self.timeout.eval(" not in body:
            problems.append("ExecutionState._evaluate_with_timeout no longer evaluates self.timeout")
    timeout_mod = _module(_TIMEOUT_MODULE)
    if timeout_mod is not None:
        body = _source(getattr(getattr(timeout_mod, "Timeout", None), "_eval_body", None))
        if body and "self._eval_seconds(" not in body:
            problems.append("Timeout._eval_body no longer calls _eval_seconds")

    retrier = _module(_RETRIER_MODULE)
    if retrier is not None:
        if not isinstance(getattr(retrier, "time", None), types.ModuleType):
            problems.append(f"{_RETRIER_MODULE} no longer imports the time module")
        decl = getattr(retrier, "RetrierDecl", None)
        if "time.sleep(" not in _source(getattr(decl, "_eval_body", None)):
            problems.append("RetrierDecl._eval_body no longer sleeps with time.sleep")

    for name in _TASK_LAMBDA_MODULES:
        mod = _module(name)
        if mod is not None and '["errorType"]' not in _source(mod):
            problems.append(f"{name} no longer reads the error name from the payload's errorType")

    if problems:
        import moto

        raise RuntimeError(
            f"moto {getattr(moto, '__version__', '?')} internals used by sandbox.stepfunctions moved:\n  - "
            + "\n  - ".join(problems)
        )


# =============================================================================================
# executions


def wait_for_execution(sfn_client: Any, execution_arn: str, timeout: float = 60.0) -> dict[str, Any]:
    """Poll ``describe_execution`` until the execution is no longer RUNNING; return the description."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        desc: dict[str, Any] = sfn_client.describe_execution(executionArn=execution_arn)
        if desc.get("status") != "RUNNING":
            return desc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"execution {execution_arn} still RUNNING after {timeout:g}s")
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 0.2)


# =============================================================================================
# execution traces

_SCHEDULED = frozenset({"LambdaFunctionScheduled", "TaskScheduled", "ActivityScheduled"})
_SUCCEEDED = frozenset({"LambdaFunctionSucceeded", "TaskSucceeded", "ActivitySucceeded"})
_FAILED = frozenset(
    {
        "LambdaFunctionFailed",
        "LambdaFunctionScheduleFailed",
        "LambdaFunctionStartFailed",
        "LambdaFunctionTimedOut",
        "TaskFailed",
        "TaskStartFailed",
        "TaskSubmitFailed",
        "TaskTimedOut",
        "ActivityFailed",
        "ActivityScheduleFailed",
        "ActivityTimedOut",
    }
)
_EXECUTION_END = {
    "ExecutionSucceeded": "SUCCEEDED",
    "ExecutionFailed": "FAILED",
    "ExecutionAborted": "ABORTED",
    "ExecutionTimedOut": "TIMED_OUT",
}


@dataclass
class TaskAttempt:
    """One scheduling of a Task's resource (a Lambda invocation, an SDK call)."""

    resource: str
    started: datetime
    ended: datetime | None = None
    error: str | None = None  # None: succeeded (or still running when ended is None)
    cause: str | None = None


@dataclass
class StateVisit:
    """One entry into a state, as the console's "Events"/"Graph" view shows it."""

    name: str
    type: str | None  # "Task", "Wait", "Map", ... (from the event type)
    entered: datetime
    exited: datetime | None = None
    outcome: str = "running"  # succeeded | retried | caught | failed | aborted | timed out | running
    error: str | None = None
    cause: str | None = None
    attempts: list[TaskAttempt] = field(default_factory=list)
    depth: int = 0  # nesting inside Map iterations / Parallel branches
    parent: StateVisit | None = field(default=None, repr=False)
    entered_event_id: int = 0

    @property
    def duration(self) -> float | None:
        """Seconds from entered to exited (None while still in the state)."""
        return None if self.exited is None else (self.exited - self.entered).total_seconds()

    @property
    def retries(self) -> int:
        """Attempts after the first."""
        return max(0, len(self.attempts) - 1)

    @property
    def errors(self) -> list[str]:
        """Error names of the failed attempts, in order."""
        return [a.error for a in self.attempts if a.error is not None]

    @property
    def message(self) -> str | None:
        """``error: errorMessage`` (from a Lambda error payload) or ``error: cause``."""
        if self.error is None:
            return None
        return _error_message(self.error, self.cause)


def _error_message(error: str, cause: str | None) -> str:
    detail = cause or ""
    try:
        doc = json.loads(detail)
    except (TypeError, ValueError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("errorMessage"), str):
        detail = doc["errorMessage"]
    return f"{error}: {detail}" if detail else error


@dataclass
class ExecutionTrace:
    execution_arn: str
    status: str
    states: list[StateVisit]
    transitions: int  # StateEntered events: what Standard workflows bill as state transitions
    task_invocations: int  # Task resource schedulings (Lambda invocations, SDK calls), retries included
    started: datetime | None = None
    stopped: datetime | None = None
    error: str | None = None
    cause: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def duration(self) -> float | None:
        if self.started is None or self.stopped is None:
            return None
        return (self.stopped - self.started).total_seconds()

    @property
    def names(self) -> list[str]:
        """The states entered, in order (repeats included)."""
        return [v.name for v in self.states]

    def visits(self, name: str) -> list[StateVisit]:
        return [v for v in self.states if v.name == name]

    def visit(self, name: str) -> StateVisit:
        """The first visit of state ``name`` (KeyError if it was never entered)."""
        for v in self.states:
            if v.name == name:
                return v
        raise KeyError(f"state {name!r} was never entered (entered: {', '.join(dict.fromkeys(self.names))})")

    def render(self, *, width: int = 60) -> str:
        """A table like the Step Functions console's: state, type, start offset, duration, outcome, error."""
        name = self.execution_arn.rsplit(":", 2)
        title = ":".join(name[-2:]) if len(name) >= 2 else self.execution_arn
        total = f" in {self.duration:.3f} s" if self.duration is not None else ""
        lines = [
            f"execution {title}: {self.status}{total}, {self.transitions} state transitions, "
            f"{self.task_invocations} task invocations"
        ]
        t0 = self.started or (self.states[0].entered if self.states else None)
        rows = [("#", "State", "Type", "Start", "Duration", "Outcome", "Error")]
        for i, v in enumerate(self.states, 1):
            start = f"+{(v.entered - t0).total_seconds():.3f}s" if t0 is not None else ""
            duration = f"{v.duration:.3f}s" if v.duration is not None else "-"
            outcome = v.outcome
            if v.retries:
                outcome += f" ({v.retries} retr{'y' if v.retries == 1 else 'ies'})"
            error = v.message or ""
            if not error and v.errors:
                error = "retried on " + ", ".join(dict.fromkeys(v.errors))
            error = " ".join(error.split())
            if len(error) > width:
                error = error[: width - 3] + "..."
            rows.append((str(i), "  " * v.depth + v.name, v.type or "", start, duration, outcome, error))
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        right = {0, 3, 4}
        for r in rows:
            cells = [cell.rjust(widths[c]) if c in right else cell.ljust(widths[c]) for c, cell in enumerate(r)]
            lines.append("  ".join(cells).rstrip())
        if self.error:
            lines.append(f"execution error: {_error_message(self.error, self.cause)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def _history(sfn_client: Any, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
    while True:
        page = sfn_client.get_execution_history(**kwargs)
        events.extend(page.get("events") or [])
        token = page.get("nextToken")
        if not token:
            return events
        kwargs["nextToken"] = token


def _details(event: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, dict):
            return value
    return {}


def execution_trace(sfn_client: Any, execution_arn: str) -> ExecutionTrace:
    """The states an execution entered, in order, with durations and outcomes (from its full history)."""
    events = sorted(_history(sfn_client, execution_arn), key=lambda e: int(e["id"]))
    visits: list[StateVisit] = []
    closed: set[int] = set()  # id() of exited visits
    owner: dict[int, StateVisit | None] = {}  # event id -> the visit it belongs to
    open_attempt: dict[int, TaskAttempt] = {}  # id(visit) -> attempt in flight
    status = "RUNNING"
    started = stopped = None
    exec_error = exec_cause = None
    transitions = invocations = 0

    def _open(v: StateVisit | None) -> StateVisit | None:
        while v is not None and id(v) in closed:
            v = v.parent
        return v

    for event in events:
        etype: str = event["type"]
        eid = int(event["id"])
        ts: datetime = event["timestamp"]
        details = _details(event)
        prev_owner = owner.get(int(event.get("previousEventId") or 0))

        if etype == "ExecutionStarted":
            started = ts
            owner[eid] = None
        elif etype.endswith("StateEntered"):
            transitions += 1
            parent = _open(prev_owner)
            visit = StateVisit(
                name=str(details.get("name", "?")),
                type=etype.removesuffix("StateEntered") or None,
                entered=ts,
                depth=parent.depth + 1 if parent is not None else 0,
                parent=parent,
                entered_event_id=eid,
            )
            visits.append(visit)
            owner[eid] = visit
        elif etype.endswith("StateExited"):
            name = details.get("name")
            target = _open(prev_owner)
            while target is not None and target.name != name:
                target = target.parent
            if target is None:  # fall back on the latest open visit of that name
                target = next((v for v in reversed(visits) if v.name == name and id(v) not in closed), None)
            if target is not None:
                target.exited = ts
                closed.add(id(target))
                attempt = open_attempt.pop(id(target), None)
                if attempt is not None and attempt.ended is None:
                    attempt.ended = ts
                last = target.attempts[-1] if target.attempts else None
                if last is not None and last.error is not None:
                    target.outcome, target.error, target.cause = "caught", last.error, last.cause
                elif target.errors:
                    target.outcome = "retried"
                else:
                    target.outcome = "succeeded"
            owner[eid] = target
        elif etype in _EXECUTION_END:
            status, stopped = _EXECUTION_END[etype], ts
            exec_error, exec_cause = details.get("error"), details.get("cause")
            owner[eid] = None
        else:
            target = _open(prev_owner)
            owner[eid] = target
            if target is None:
                continue
            if etype in _SCHEDULED:
                invocations += 1
                resource = str(details.get("resource", ""))
                if details.get("resourceType"):
                    resource = f"{details['resourceType']}:{resource}"
                attempt = TaskAttempt(resource=resource, started=ts)
                target.attempts.append(attempt)
                open_attempt[id(target)] = attempt
            elif etype in _SUCCEEDED or etype in _FAILED:
                attempt = open_attempt.pop(id(target), None)
                if attempt is None:
                    attempt = TaskAttempt(resource="", started=ts)
                    target.attempts.append(attempt)
                attempt.ended = ts
                if etype in _FAILED:
                    attempt.error = str(details.get("error") or ("States.Timeout" if "TimedOut" in etype else etype))
                    attempt.cause = details.get("cause")

    # States never exited: still running, or where the execution stopped.
    final = {"FAILED": "failed", "ABORTED": "aborted", "TIMED_OUT": "timed out", "SUCCEEDED": "succeeded"}
    for v in visits:
        if id(v) in closed:
            continue
        v.outcome = final.get(status, "running")
        last = v.attempts[-1] if v.attempts else None
        if last is not None and last.error is not None:
            v.error, v.cause = last.error, last.cause
        elif status == "FAILED" and not any(id(c) not in closed for c in visits if c.parent is v):
            v.error, v.cause = exec_error, exec_cause  # e.g. a Fail state, or a Map whose iteration failed

    return ExecutionTrace(
        execution_arn=execution_arn,
        status=status,
        states=visits,
        transitions=transitions,
        task_invocations=invocations,
        started=started,
        stopped=stopped,
        error=exec_error,
        cause=exec_cause,
        events=events,
    )
