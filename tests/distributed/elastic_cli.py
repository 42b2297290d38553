"""``keras-caffe`` (``python elastic_cli.py train ...``) with fault injection, for test_elastic.

``KILL_RANK=r KILL_AT=n``: while more than one worker runs, rank ``r``
SIGKILLs itself before the first train-step call starting at iteration
``n`` or later (the Solver calls its compiled step once per chunk between
log / test / snapshot / commit points, so the point is deterministic).
"""

import os
import signal
import sys

import keras_caffe.distributed as kd
import keras_caffe.solver as solver_module
from keras_caffe import cli

KILL_RANK = int(os.environ.get("KILL_RANK", "-1"))
KILL_AT = int(os.environ.get("KILL_AT", "-1"))
_train_function = solver_module.train_function


def train_function(outputs, optimizer, *args, **kwargs):
    run = _train_function(outputs, optimizer, *args, **kwargs)

    def maybe_die(iterator, k):
        if (kd.rank() == KILL_RANK and kd.size() > 1
                and int(optimizer.iterations.numpy()) >= KILL_AT):
            os.kill(os.getpid(), signal.SIGKILL)
        return run(iterator, k)

    return maybe_die


solver_module.train_function = train_function
sys.exit(cli.main())
