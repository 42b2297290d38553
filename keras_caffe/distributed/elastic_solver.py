"""The Caffe solver, elastic: ``keras-caffe train --elastic``.

``Solver(..., elastic=True).solve()`` trains inside
``keras_caffe.distributed.elastic.run`` with a ``KerasState`` of the train
net and the optimizer plus the solver's own positions, committed every
``commit_every`` iterations (a chunk boundary of the train loop):

- committed: every variable of the train net and of the optimizer (so the
  iteration), the random-generator states, the data seed, the number of
  tests run and each test stream's position; the train stream's position
  is ``iteration * iter_size`` batches of the worker's shard, as in a
  snapshot.
- after a reset (a worker lost: the survivors restore the last commit
  first; or hosts added/removed): rank 0's state goes to everyone, each
  worker re-reads its shard for the new ``(rank, size)`` from the
  committed position, the train step is rebuilt (with the all-reduce only
  when more than one worker is left, so one survivor trains exactly like
  one process), and the new rank 0 logs
  ``workers: 2 -> 1, resumed from iteration N`` and takes over the logs and
  snapshots.

This is what resuming a snapshot taken at the commit with the new number
of workers does, so the weights equal that run's bit for bit. The global
batch changes with the number of workers; the rate does not (the solver
file's, or ``--scale-lr``'s with the number of workers at the start).
"""

import sys

from keras_caffe.distributed.context import worker
from keras_caffe.distributed.elastic import KerasState, elastic_launch, run


class SolverState(KerasState):
    """The train net, the optimizer and the solver's data positions."""

    def __init__(self, solver):
        self.solver = solver
        super().__init__(solver.net, solver.optimizer, seed=solver.seed,
                         tests_done=solver._tests_done, test_batches=list(solver._test_batches))

    def take(self):
        """Copy the solver's positions into the state (before a commit)."""
        self.seed = self.solver.seed
        self.tests_done = self.solver._tests_done
        self.test_batches = list(self.solver._test_batches)


def train_elastic(solver):
    """Train ``solver`` to ``max_iter``, recovering from lost workers."""
    if not elastic_launch() and solver.worker.size > 1:
        _say(solver, "--elastic: not an elastic horovodrun (no --min-np / "
                     "--host-discovery-script): a lost worker stops the job")
    state = SolverState(solver)
    world = {"size": solver.worker.size}

    def commit():
        state.take()
        state.commit()

    @run
    def attempt(state):
        _enter_world(solver, state, world)
        solver.step(solver.param.max_iter - solver.iter)

    solver._on_commit = commit
    try:
        attempt(state)
    finally:
        solver._on_commit = None


def _enter_world(solver, state, world):
    """After a sync: this worker's rank and shard, rank 0's positions."""
    me = worker()
    moved = (me.rank, me.size) != (solver.worker.rank, solver.worker.size)
    solver.worker = me
    solver.distributed = me.size > 1
    if solver._log:
        solver._log.enabled = me.is_chief
    solver._progress = solver._log_mode == "progress" and me.is_chief
    if state.seed != solver.seed:  # the pipelines are functions of the seed
        solver.seed = state.seed
        solver._test_pipes = [solver._pipeline(t, "TEST", (0, 1)) for t in solver._tests]
        moved = True
    if moved:
        solver._shard = (me.rank, me.size)
        solver._train_pipes = solver._train_pipelines()
        solver._build_train_step()
    solver._tests_done = state.tests_done
    solver._open_streams(solver.iter * solver.param.iter_size, state.test_batches)
    if me.size != world["size"]:
        _say(solver, f"workers: {world['size']} -> {me.size}, resumed from iteration "
                     f"{solver.iter}")
        world["size"] = me.size


def _say(solver, message):
    if solver._log:
        solver._log.info(message)
    elif solver.worker.is_chief and solver._log_mode == "progress":
        print(message, file=sys.stderr)
