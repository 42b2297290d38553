"""The Solver's snapshot files: ``{snapshot_prefix}_iter_{N}`` weights and
solver state written with the resume state (``resume_state``), the
prefix's directory created; and a ``.solverstate`` read back, its resume
state checked before anything changes. Without a ``snapshot_prefix`` the
files go next to the solver file, named after it."""

import os

from keras_caffe.importers.snapshots.files import load_snapshot, save_snapshot
from keras_caffe.training import resume_state


def snapshot_prefix(param, source):
    """The file's ``snapshot_prefix``, else the solver file's path without
    its extension."""
    return param.snapshot_prefix or os.path.splitext(str(source))[0]


def write(net, optimizer, prefix, iteration, *, format, state):
    """Write the snapshot of ``iteration`` under ``prefix`` in ``format``
    with the resume ``state``; returns the ``SnapshotFiles``."""
    directory = os.path.dirname(os.path.abspath(prefix + "_"))
    os.makedirs(directory, exist_ok=True)
    return save_snapshot(net, optimizer, prefix, iteration, format=format, state=state)


def read(path, net, optimizer, test_nets):
    """Restore ``net`` and ``optimizer`` from the ``.solverstate`` at
    ``path``; returns its resume state ({} for Caffe's own files), checked
    as one of a solver with ``test_nets`` test nets."""

    def check(stored):  # before the snapshot changes anything
        resume_state.check(path, stored, test_nets, resume_state.VERSION)

    return load_snapshot(path, net, optimizer, check_state=check)
