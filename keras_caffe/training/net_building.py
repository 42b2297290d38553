"""The nets and the optimizer a solver file describes, built for the Solver.

The train net and the test nets as Caffe's ``Solver::InitTrainNet`` /
``InitTestNets`` choose them (``train_net_param``, ``train_net``,
``net_param`` or ``net``; ``test_net_param`` / ``test_net``, else the
generic net once per ``test_iter``; a net file from the current directory,
then next to the solver file), each imported for its phase and
``NetState``; the blobs a test net shares with the train net, layer by
layer and by name (``ShareTrainedLayersWith``); and the optimizer of the
file's ``type`` with the nets' ``lr_mult`` / ``decay_mult``, compiled into
the train net.
"""

import os

from keras_caffe.distributed import ScaledLearningRate
from keras_caffe.errors import KerasCaffeError, SolverError
from keras_caffe.importers.formats.paths import locate
from keras_caffe.importers.net.compile_args import training_args
from keras_caffe.importers.net.blobs import caffe_parts, param_multipliers
from keras_caffe.importers.net.importing import import_net
from keras_caffe.optimizers.from_solver import optimizer_from_solver
from keras_caffe.schedules import schedule_from_param


def net_sources(param, source):
    """``(train, [(test, test_state)])`` as Caffe's InitTrainNet/InitTestNets
    choose them; each net a path or a NetParameter."""
    p = param
    given = [f for f in ("train_net_param", "train_net", "net_param", "net") if p.HasField(f)]
    if not given:
        raise SolverError(source, "no train net: set one of train_net_param, "
                                  "train_net, net_param, net")
    if len(given) > 1:
        raise SolverError(source, f"several train nets ({', '.join(given)}); set only one")
    field = given[0]
    train = getattr(p, field) if field.endswith("_param") else _find(getattr(p, field), field,
                                                                       source)
    generic = None
    if p.HasField("net_param"):
        generic = p.net_param
    elif p.HasField("net"):
        generic = _find(p.net, "net", source)
    specific = list(p.test_net_param) + [_find(f, "test_net", source) for f in p.test_net]
    if generic is None and len(p.test_iter) != len(specific):
        if not specific:
            raise SolverError(source, f"test_iter is set ({len(p.test_iter)} value(s)) "
                                      "but there is no test net: set test_net or net, "
                                      "or remove test_iter")
        raise SolverError(source, f"test_iter must be given once per test net: "
                                  f"{len(specific)} test net(s), {len(p.test_iter)} "
                                  "test_iter value(s)")
    if generic is not None and len(p.test_iter) < len(specific):
        raise SolverError(source, "test_iter must be specified for each test network")
    nets = specific + [generic] * (len(p.test_iter) - len(specific))
    if p.test_state and len(p.test_state) != len(nets):
        raise SolverError(source, f"test_state must be given once per test net "
                                  f"({len(nets)}), got {len(p.test_state)}")
    # Caffe accepts test_interval without test nets and tests nothing.
    states = list(p.test_state) or [None] * len(nets)
    return train, list(zip(nets, states))


def _find(path, field, source):
    """A net file named by ``field``: from the cwd (Caffe), then next to the solver."""
    found = locate(path, source, exists=os.path.isfile)
    if found is not None:
        return found
    raise SolverError(source, f"{field}: net file {path!r} not found (looked in the "
                              "current directory and next to the solver file)")


def train_state(param):
    """The solver file's ``train_state`` (a ``NetState``), or None."""
    return param.train_state if param.HasField("train_state") else None


def level_and_stages(state):
    """``(level, stages)`` of a ``NetState`` (None: level 0, no stage)."""
    if state is None:
        return 0, ()
    return state.level, tuple(state.stage)


def import_for_phase(net, phase, state, *, source, data_format, log=None):
    """``net`` (a path or a NetParameter) imported for ``phase`` and
    ``state``, with ``net_source`` set (the file data sources are looked up
    from: its own, or the solver file's); Caffe's "Creating ... net" line
    on ``log``."""
    level, stages = level_and_stages(state)
    if log:
        log.creating_net(phase, net if isinstance(net, str) else "net parameter")
    imported = import_net(net, phase=phase, level=level, stages=stages, data_format=data_format)
    imported.net_source = net if isinstance(net, str) else str(source)
    return imported


def shared_variables(train_model, test_model, source):
    """(train variable, test variable) pairs: Caffe's test nets share the
    train net's blobs layer by layer, by name (``ShareTrainedLayersWith``)."""
    train_parts = caffe_parts(train_model)
    pairs = []
    for name, (layer, start, count, _) in caffe_parts(test_model).items():
        if name not in train_parts:
            continue
        trained, s_start, s_count, _ = train_parts[name]
        targets = layer.caffe_variables()[start:start + count]
        sources = trained.caffe_variables()[s_start:s_start + s_count]
        if len(targets) != len(sources) or any(
                tuple(a.shape) != tuple(b.shape) for a, b in zip(sources, targets)):
            raise KerasCaffeError(f"{source}: layer {name!r} has different blobs in "
                                  "the train and test nets; they cannot share weights")
        pairs.extend(zip(sources, targets))
    return pairs


def make_optimizer(param, source, net, *, scaled_workers=None, warmup_iters=0):
    """The optimizer of the solver file for ``net`` (its ``lr_mult`` /
    ``decay_mult``); with ``scaled_workers``, the rate times that many
    workers after ``warmup_iters`` (``ScaledLearningRate``)."""
    lr_mult, decay_mult = param_multipliers(net)
    extra = {}
    if scaled_workers:
        extra["learning_rate"] = ScaledLearningRate(
            schedule_from_param(param, source), workers=scaled_workers,
            warmup_steps=warmup_iters)
    return optimizer_from_solver(param, lr_mult=lr_mult, decay_mult=decay_mult, **extra)


def compile_train_net(net, optimizer, jit_compile):
    """Compile the train net with ``optimizer`` and its Caffe losses, and
    build the optimizer's slots for its trainable variables."""
    net.compile(optimizer=optimizer, jit_compile=jit_compile, **training_args(net))
    optimizer.build(net.trainable_variables)
