"""Read-only queries over a model's Caffe layers: which Keras layers hold
which Caffe layers' blobs, who shares them, their values and their
``param { lr_mult decay_mult }``.

The Keras layers that hold Caffe blobs are ``keras_caffe.layers.CaffeBlobs``
(``caffe_parts``, ``caffe_variables``, ``caffe_blobs``, ``caffe_sharers``,
``param_multipliers``); these functions answer for a whole model, one built
by ``import_model`` or loaded from a .keras file. Nothing here changes the
model or writes a file (``export`` writes .caffemodel files, ``importing``
loads weights).
"""

from keras_caffe.layers import CaffeBlobs


def blob_layers(model):
    """The Keras layers of ``model`` that hold Caffe blobs, in the model's order."""
    return [layer for layer in model.layers if isinstance(layer, CaffeBlobs)]


def caffe_parts(model):
    """``{Caffe layer name: (Keras layer, first weight, weight count, type)}``.

    Most Keras layers hold one Caffe layer; a fused BatchNorm+Scale holds two.
    """
    parts = {}
    for layer in blob_layers(model):
        start = 0
        for name, caffe_type, count in layer.caffe_parts:
            parts[name] = (layer, start, count, caffe_type)
            start += count
    return parts


def caffe_sharers(model):
    """``{sharer Caffe layer name: owner Caffe layer name}``: the layers that
    share all their blobs with another (``param { name }``), whose Keras layer
    they reuse (``keras_caffe.importers.net.sharing``)."""
    return {sharer: layer.caffe_parts[0][0]
            for layer in blob_layers(model) for sharer in layer.caffe_sharers}


def caffe_layers(model):
    """``{Caffe layer name: Keras layer}`` for the Caffe layers that hold blobs."""
    return {name: part[0] for name, part in caffe_parts(model).items()}


def model_blobs(model):
    """``{Caffe layer name: [arrays]}``: the blobs of ``model``'s Caffe layers
    in Caffe's shapes and order, layers in the model's order (owners only: a
    layer sharing another's blobs is in ``caffe_sharers``); {} for a model
    without layers holding Caffe blobs."""
    by_layer = {}
    for layer in blob_layers(model):
        blobs = layer.caffe_blobs()
        start = 0
        for name, _, count in layer.caffe_parts:
            by_layer[name] = blobs[start:start + count]
            start += count
    return by_layer


def param_multipliers(model):
    """Caffe's per-parameter ``lr_mult`` and ``decay_mult`` for the optimizers.

    Returns ``(lr_mult, decay_mult)``: dicts from Keras variable path to the
    value the net's prototxt gives (``param { lr_mult decay_mult }``; 1 where
    it gives none), ready for ``keras_caffe.SGD(lr_mult=..., decay_mult=...)``.
    """
    lr_mult, decay_mult = {}, {}
    for layer in blob_layers(model):
        variables = layer.caffe_variables()
        specs = layer.param_multipliers or [[1.0, 1.0]] * len(variables)
        for weight, (lr, decay) in zip(variables, specs):
            lr_mult[weight.path] = lr
            decay_mult[weight.path] = decay
    return lr_mult, decay_mult
