"""Loading a net definition: parse, upgrade, and keep the layers of a phase."""

from keras_caffe.errors import CaffeImportError
from keras_caffe.importers.protofile import read_message
from keras_caffe.importers.upgrade import upgrade_net
from keras_caffe.proto import caffe_pb2

PHASES = {"TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST}


def read_net(net):
    """``(NetParameter, source)`` for a path, prototxt text or NetParameter, upgraded."""
    param, source = read_message(net, caffe_pb2.NetParameter, "<prototxt text>")
    return upgrade_net(param, source), source


def net_state(phase="TEST", level=0, stages=()):
    """A ``NetState``; ``phase`` is "TRAIN"/"TEST" (or Caffe's enum)."""
    if isinstance(phase, str):
        if phase.upper() not in PHASES:
            raise CaffeImportError(f"phase must be 'TRAIN' or 'TEST', got {phase!r}")
        phase = PHASES[phase.upper()]
    state = caffe_pb2.NetState(phase=phase, level=level)
    state.stage.extend(stages)
    return state


def filter_net(net, state):
    """The layers Caffe's ``Net::FilterNet`` keeps for ``state``.

    A layer with ``include`` rules is kept if any rule is met; otherwise it
    is kept unless an ``exclude`` rule is met. A layer's own ``phase`` field
    does not filter (Caffe sets it itself).
    """
    merged = caffe_pb2.NetState()
    merged.CopyFrom(net.state)
    merged.MergeFrom(state)
    kept = caffe_pb2.NetParameter()
    kept.CopyFrom(net)
    kept.ClearField("layer")
    for layer in net.layer:
        if layer.include and layer.exclude:
            raise CaffeImportError(
                f"layer {layer.name!r} specifies both include and exclude; only one may be given"
            )
        if layer.include:
            keep = any(_meets(merged, rule) for rule in layer.include)
        else:
            keep = not any(_meets(merged, rule) for rule in layer.exclude)
        if keep:
            kept.layer.add().CopyFrom(layer)
    return kept


def _meets(state, rule):
    """Caffe's ``Net::StateMeetsRule``."""
    if rule.HasField("phase") and rule.phase != state.phase:
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        return False
    stages = set(state.stage)
    if any(stage not in stages for stage in rule.stage):
        return False
    return not any(stage in stages for stage in rule.not_stage)
