"""``keras-caffe`` (``python elastic_cli.py train ...``) with fault injection, for test_elastic.

``KILL_RANK=r KILL_AT=n``: while more than one worker runs, rank ``r``
SIGKILLs itself before the first train-step call starting at iteration
``n`` or later (the Solver calls its compiled step once per chunk between
log / test / snapshot / commit points, so the point is deterministic).

``JOIN_AT=n JOIN_FILE=f``: rank 0 of a one-worker world creates ``f`` at
the commit of iteration ``n`` (the test's discovery script then lists a
second host) and commits until Horovod reports the new host.
"""

import os
import signal
import sys
import time

import keras_caffe.distributed as kd
import keras_caffe.training.solver as solver_module
from keras_caffe import cli

KILL_RANK = int(os.environ.get("KILL_RANK", "-1"))
KILL_AT = int(os.environ.get("KILL_AT", "-1"))
JOIN_AT = int(os.environ.get("JOIN_AT", "-1"))
JOIN_FILE = os.environ.get("JOIN_FILE")
_train_function = solver_module.train_function


def train_function(outputs, optimizer, *args, **kwargs):
    run = _train_function(outputs, optimizer, *args, **kwargs)

    def maybe_die(iterator, k):
        if (kd.rank() == KILL_RANK and kd.size() > 1
                and int(optimizer.iterations.numpy()) >= KILL_AT):
            os.kill(os.getpid(), signal.SIGKILL)
        return run(iterator, k)

    return maybe_die


def wait_for_joiner(commit):
    def commit_then_wait(state):
        commit(state)
        if kd.rank() == 0 and kd.size() == 1 and state.solver.iter == JOIN_AT:
            open(JOIN_FILE, "w").close()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # raises HostsUpdatedInterrupt when it joins
                commit(state)
                time.sleep(0.2)  # polls the launcher's notification; not a synchronisation
            raise SystemExit("no worker joined within 120 s")

    return commit_then_wait


solver_module.train_function = train_function
if JOIN_FILE:
    from keras_caffe.distributed import elastic_solver

    _commit = elastic_solver.SolverState.commit
    elastic_solver.SolverState.commit = wait_for_joiner(_commit)
try:
    status = cli.main()
finally:  # as it was: horovod_jobs's case runner may run more in this process
    solver_module.train_function = _train_function
    if JOIN_FILE:
        elastic_solver.SolverState.commit = _commit
sys.exit(status)
