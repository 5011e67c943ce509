"""``python -m nodeflow``: one command, one short-lived process.

Two things a one-shot process need not pay for (measured on ``plan`` over 20,000 pods, benchmarks/plan_scale.py):

* the cyclic garbage collector: its passes rescan every live object (each pod's models, the catalog) again and
  again while the solver allocates, 1 to 2 s CPU of about 10 (timed with ``gc.callbacks``), for garbage that
  reference counting frees anyway (peak memory the same, 183 MB either way); it is off for the whole command, as
  nodeflow already pauses it around loading, building the input and the provisioner's solve;
* tearing the interpreter down (freeing every object one by one, about 0.5 s CPU): once the command has
  returned, the output is flushed, the ``atexit`` hooks run, and the process ends with its exit code. Where a
  flush fails (a closed pipe) or another thread is still running, Python's own exit does what it always did.
"""

import gc
import sys

gc.disable()

from nodeflow.cli import main  # noqa: E402 - after the collector is off: imports allocate too

code = main()


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


_exit_now(code)
sys.exit(code)
