"""Caffe's shared parameters: ``param { name: "..." }``.

In Caffe (``Net::AppendParam``, caffe/src/caffe/net.cpp) the first layer
naming a parameter owns it; a later layer naming it shares the owner's blob
(data and diff), so its gradient adds to the owner's and the solver updates
one blob. The sharer's blob must have the owner's shape, or with
``share_mode: PERMISSIVE`` the same count. The owner's ``lr_mult`` and
``decay_mult`` apply; a sharer may give them where the owner does not, and
must agree where both do ("Shared param ... has mismatched lr_mult").

keras-caffe shares a layer's parameters the Keras way: the sharer applies
the owner's Keras layer to its own bottoms, so the variables are one, the
gradients add up, the model saves and reloads as a ``.keras`` file, and
snapshots hold one copy. That needs the sharer to share *all* its blobs
with one layer, blob for blob, with the owner's configuration (its fillers
aside: Caffe overwrites the sharer's initial values with the owner's); other
sharing is refused with what differs.
"""

import math

from keras_caffe.errors import LayerError
from keras_caffe.proto import caffe_pb2

#: Configuration keys a sharer may differ in: names, multipliers (resolved
#: onto the owner) and fillers (Caffe shares the owner's values).
_FREE_KEYS = {"name", "caffe_name", "param_multipliers", "caffe_sharers", "kernel_initializer",
              "bias_initializer", "slope_initializer", "trainable"}


def _shape_text(shape):
    """A shape as Caffe prints it: ``20 1 5 5 (500)``."""
    return f"{' '.join(str(d) for d in shape)} ({math.prod(shape)})"


class ParamSharing:
    """Owners and sharers of named parameters while a net is built."""

    def __init__(self):
        #: param name -> (owner Caffe layer name, blob index)
        self.owners = {}
        #: owner Caffe layer name -> its Keras layer
        self.owner_layers = {}
        #: sharer Caffe layer name -> owner Caffe layer name
        self.sharers = {}

    def layer_for(self, layer, candidate, inputs):
        """The Keras layer to apply for Caffe ``layer`` on ``inputs``:
        ``candidate`` (the new layer its unit built), or the owner's layer when
        ``layer`` names parameters an earlier layer owns."""
        names = [spec.name for spec in layer.param]
        if layer.name in self.sharers:  # a further bottom of the same layer
            return self.owner_layers[self.sharers[layer.name]]
        if layer.name in self.owner_layers:
            return self.owner_layers[layer.name]
        if not any(name in self.owners for name in names if name):
            for index, name in enumerate(names):
                if name:
                    self.owners.setdefault(name, (layer.name, index))
            if any(names):
                self.owner_layers[layer.name] = candidate
            return candidate
        candidate(inputs)  # builds it, for its blob shapes; its output is not used
        owner_name = self._check(layer, candidate, names)
        owner = self.owner_layers[owner_name]
        owner.caffe_sharers.append(layer.name)
        self.sharers[layer.name] = owner_name
        return owner

    def _check(self, layer, candidate, names):
        """Caffe's shape check, then what reusing the owner's layer needs;
        returns the owner's Caffe name."""
        shapes = candidate.caffe_blob_shapes()
        owner_name = None
        for index, name in enumerate(names[:len(shapes)]):
            if not name or name not in self.owners:
                continue
            owner_name_i, owner_index = self.owners[name]
            owner_shapes = self.owner_layers[owner_name_i].caffe_blob_shapes()
            mine, theirs = tuple(shapes[index]), tuple(owner_shapes[owner_index])
            permissive = layer.param[index].share_mode == caffe_pb2.ParamSpec.PERMISSIVE
            head = (f"cannot share param {name!r} owned by layer {owner_name_i!r}; "
                    f"{'count' if permissive else 'shape'} mismatch. Owner layer param shape is "
                    f"{_shape_text(theirs)}; sharing layer ")
            if permissive and math.prod(mine) != math.prod(theirs):
                raise LayerError(layer.name, head + f"shape is {_shape_text(mine)}")
            if not permissive and mine != theirs:
                raise LayerError(layer.name, head + f"expects shape {_shape_text(mine)}")
            if mine != theirs:
                raise LayerError(layer.name, f"shares param {name!r} with layer {owner_name_i!r} "
                                             f"under PERMISSIVE as shape {mine} (the owner's is "
                                             f"{theirs}); keras-caffe shares parameters by "
                                             "reusing the owner's layer, which needs equal shapes")
            owner_name = owner_name or owner_name_i
        plan = [self.owners.get(name) if name else None
                for name in (names + [""] * len(shapes))[:len(shapes)]]
        wanted = [(owner_name, i) for i in range(len(shapes))]
        owner_count = len(self.owner_layers[owner_name].caffe_blob_shapes())
        if plan != wanted or owner_count != len(shapes):
            raise LayerError(layer.name, f"shares only some of its {len(shapes)} blobs with layer "
                                         f"{owner_name!r} ({_plan_text(plan)}); keras-caffe shares "
                                         "a layer's parameters by reusing the owner's layer, so a "
                                         f"layer must share all of them, in order, with one layer "
                                         f"of as many blobs (it has {owner_count})")
        owner = self.owner_layers[owner_name]
        mine, theirs = _config(candidate), _config(owner)
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if type(candidate) is not type(owner) or differ:
            what = ", ".join(f"{k}: {mine.get(k)!r} vs {theirs.get(k)!r}" for k in differ)
            raise LayerError(layer.name, f"shares its parameters with layer {owner_name!r} but is "
                                         f"configured differently ({what or type(candidate).__name__}"
                                         "); keras-caffe shares parameters by reusing the owner's "
                                         "layer, which needs the same configuration")
        return owner_name

    def resolve_multipliers(self, net, parts):
        """Set each owner's ``param_multipliers`` from its own ``param {}``
        and its sharers' (Caffe's ``params_lr_`` / ``params_weight_decay_``
        rules), given ``parts`` (``caffe_parts`` of the model)."""
        explicit = {}
        for layer in net.layer:
            owner = self.sharers.get(layer.name, layer.name)
            if owner not in parts:
                continue
            target, start, count, caffe_type = parts[owner]
            specs = list(layer.param)[:count]
            multipliers = (list(target.param_multipliers)
                           or [[1.0, 1.0]] * len(target.caffe_variables()))
            for index in range(count):
                spec = specs[index] if index < len(specs) else None
                slot = multipliers[start + index] = list(multipliers[start + index])
                if owner == layer.name:
                    # Caffe's BatchNorm gives its statistics lr_mult 0 unless told otherwise.
                    default = [0.0, 1.0] if caffe_type == "BatchNorm" else [1.0, 1.0]
                    slot[:] = [spec.lr_mult, spec.decay_mult] if spec is not None else default
                    explicit[(owner, index)] = [spec is not None and spec.HasField(f)
                                                for f in ("lr_mult", "decay_mult")]
                    continue
                given = explicit[(owner, index)]
                for k, field in enumerate(("lr_mult", "decay_mult")):
                    if spec is None or not spec.HasField(field):
                        continue
                    value = getattr(spec, field)
                    if given[k] and value != slot[k]:
                        raise LayerError(layer.name, f"shared param {spec.name!r} has mismatched "
                                                     f"{field}: {value:g} here, {slot[k]:g} in "
                                                     f"layer {owner!r}")
                    slot[k], given[k] = value, True
            target.param_multipliers = multipliers

    def check_applied(self, layer):
        """Refuse a layer naming parameters whose layer type built no
        blob-holding layer through ``Context.apply`` (so nothing is shared)."""
        if any(spec.name for spec in layer.param) and layer.name not in self.owner_layers \
                and layer.name not in self.sharers:
            raise LayerError(layer.name, f"({layer.type}) names shared parameters "
                                         f"({', '.join(s.name for s in layer.param if s.name)}) "
                                         "but its layer type holds no blobs through "
                                         "Context.apply, so they cannot be shared")


def _plan_text(plan):
    return ", ".join(f"blob {i}: " + (f"{p[0]!r} blob {p[1]}" if p else "its own")
                     for i, p in enumerate(plan))


def _config(layer):
    return {k: v for k, v in layer.get_config().items() if k not in _FREE_KEYS}
