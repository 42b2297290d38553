"""``layer_summary``: an imported net's Caffe layers, one row each.

What ``keras-caffe import`` prints as its layer table: each Caffe layer's
name, type, output shapes in Caffe's layout (N, C, H, W), and the number of
values in its blobs (the parameters Caffe would count).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_caffe.importers.net.blobs import caffe_parts
from keras_caffe.importers.net.graph import Context
from keras_caffe.importers.net.importing import ImportedNet


class LayerSummary(NamedTuple):
    """One Caffe layer of an imported net.

    ``shapes``: one Caffe-layout shape per top the model computes, the batch
    as ``None`` where it is not fixed; ``None`` for a loss or metric top
    (the training loop computes those). ``params``: values in its blobs.
    """

    name: str
    type: str
    shapes: tuple
    params: int


def layer_summary(imported: ImportedNet) -> list[LayerSummary]:
    """The rows of ``imported`` (from ``import_net``), in the net's order."""
    counts = {name: sum(int(np.prod(w.shape))
                        for w in layer.caffe_variables()[start:start + count])
              for name, (layer, start, count, _) in caffe_parts(imported.model).items()}
    ctx = Context(None, None, imported.source)
    rows = []
    for layer in imported.net.layer:
        shapes = tuple(None if imported.blobs[top].tensor is None
                       else ctx.caffe_shape(imported.blobs[top])
                       for top in layer.top if top in imported.blobs)
        rows.append(LayerSummary(layer.name, layer.type, shapes, counts.get(layer.name, 0)))
    return rows
