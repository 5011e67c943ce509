"""``python -m nodeflow``: one command, one short-lived process.

Two things a one-shot process need not pay for (measured on ``plan`` over 20,000 pods, benchmarks/plan_scale.py):

* the cyclic garbage collector: its passes rescan every live object (each pod's models, the catalog) again and
  again while the solver allocates, 1 to 2 s CPU of about 10 (timed with ``gc.callbacks``), for garbage that
  reference counting frees anyway (peak memory the same, 183 MB either way); it is off for the whole command, as
  nodeflow already pauses it around loading, building the input and the provisioner's solve;
* tearing the interpreter down (freeing every object one by one, about 0.5 s CPU): once the command has
  returned, the output is flushed, the ``atexit`` hooks run, and the process ends with its exit code. Where a
  flush fails or another thread is still running, Python's own exit does what it always did.

A reader that stops early (``python -m nodeflow plan -o json | head``) closes the pipe: whichever command is
writing, and whether the write fails while it runs or at the final flush, the process then ends quietly with
status 141 (128 + SIGPIPE, what the shell reports for a tool the signal ended), with no traceback and nothing
left for Python's own exit to complain about. A broken pipe that is not this process's output is raised as usual.

Must not touch: any command's behaviour (``nodeflow.cli``).
"""

import gc
import sys

gc.disable()

from nodeflow.cli import main  # noqa: E402 - after the collector is off: imports allocate too

EXIT_OUTPUT_CLOSED = 141


def _output_closed() -> bool:
    """Whether stdout or stderr is a pipe (or socket) whose reader has gone; those are sent to /dev/null."""
    import os
    import select

    closed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            events = poller.poll(0)
        except (AttributeError, OSError, ValueError):  # no descriptor (replaced stream) or no poll
            continue
        if any(mask & (select.POLLERR | select.POLLHUP) for _, mask in events):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)  # what is still buffered, and the final flush, go nowhere instead of failing
            os.close(devnull)
            closed = True
    return closed


def _run() -> int:
    try:
        code = main()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        if not _output_closed():
            raise
        return EXIT_OUTPUT_CLOSED
    return code


def _exit_now(code: int) -> None:
    import atexit
    import os
    import threading

    if threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # Python's exit reports it as it always did
        return
    atexit._run_exitfuncs()
    os._exit(code)


code = _run()
_exit_now(code)
sys.exit(code)
