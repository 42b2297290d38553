"""Loading a net definition: parse, upgrade, and keep the layers of a phase."""

from keras_caffe.errors import CaffeImportError, ProtoParseError
from keras_caffe.importers.formats.file_kind import not_a_net
from keras_caffe.importers.formats.protofile import read_message, text_of
from keras_caffe.importers.formats.tolerant import parse_net_tolerant, unknown_field
from keras_caffe.importers.formats.upgrade import upgrade_net
from keras_caffe.proto import caffe_pb2

PHASES = {"TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST}


def read_net(net):
    """``(NetParameter, source)`` for a path, prototxt text or NetParameter,
    upgraded; fields of Caffe forks the schema lacks are skipped (see
    ``read_net_file`` to learn which)."""
    param, source, _ = read_net_file(net)
    return param, source


def read_net_file(net):
    """``(NetParameter, source, [SkippedField])``: ``read_net``, and the
    fields it skipped (``keras_caffe.importers.formats.tolerant``). A solver file
    (fields no net has, no layers) is refused saying so
    (``file_kind.not_a_net``)."""
    try:
        param, source = read_message(net, caffe_pb2.NetParameter, "<prototxt text>")
        skipped = []
    except ProtoParseError as err:
        if unknown_field(err) is None:
            raise
        text, source = text_of(net, caffe_pb2.NetParameter, "<prototxt text>")
        wrong_kind = not_a_net(text)
        if wrong_kind:
            raise ProtoParseError(source, wrong_kind) from None
        param, skipped = parse_net_tolerant(text, source)
    return upgrade_net(param, source), source, skipped


def load_net(net, state, known):
    """Read, upgrade and filter ``net`` for ``state``: ``(NetParameter,
    source, {layer name: [SkippedField]})``.

    A skipped field (a fork's, not in the schema) on a kept layer whose type
    ``known(type)`` says is handled is refused, naming the layer, the field
    and where it is: its meaning would be lost. On a layer of another type it
    is not: no layer type is registered for it (it is reported with the
    others), or a user's is, which can read the field's text."""
    param, source, skipped = read_net_file(net)
    indices = _kept_indices(param, state)
    kept, kept_indices = _net_of(param, indices), set(indices)
    fork_fields = {}
    for field in skipped:
        index = _nth_named(param, field.name, field.occurrence)
        layer = param.layer[index] if index is not None else None
        if index in kept_indices:
            fork_fields.setdefault(field.name, []).append(field)
        if index in kept_indices and known(layer.type):
            raise ProtoParseError(source, f"layer {layer.name!r} ({layer.type}): field "
                                          f"{field.field!r} is not in keras-caffe's schema (a "
                                          f"Caffe fork's?), so its meaning would be lost: "
                                          f"{field.detail}", line=field.line,
                                  column=field.column)
    return kept, source, fork_fields


def _nth_named(net, name, occurrence):
    found = [i for i, layer in enumerate(net.layer) if layer.name == name]
    return found[occurrence] if occurrence < len(found) else None


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
    return _net_of(net, _kept_indices(net, state))


def _net_of(net, indices):
    """``net`` with only its layers at ``indices``."""
    kept = caffe_pb2.NetParameter()
    kept.CopyFrom(net)
    kept.ClearField("layer")
    for index in indices:
        kept.layer.add().CopyFrom(net.layer[index])
    return kept


def _kept_indices(net, state):
    merged = caffe_pb2.NetState()
    merged.CopyFrom(net.state)
    merged.MergeFrom(state)
    kept = []
    for index, layer in enumerate(net.layer):
        if layer.include and layer.exclude:
            raise CaffeImportError(
                f"layer {layer.name!r} specifies both include and exclude; only one may be given"
            )
        if layer.include:
            keep = any(_meets(merged, rule) for rule in layer.include)
        else:
            keep = not any(_meets(merged, rule) for rule in layer.exclude)
        if keep:
            kept.append(index)
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
