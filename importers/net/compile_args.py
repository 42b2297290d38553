"""Compile arguments for a net imported in the TRAIN phase."""

from keras_caffe.errors import CaffeImportError


def training_args(model):
    """``model.compile`` arguments for the loss and Accuracy layers of the net.

    ``model.compile(optimizer=..., **training_args(model))``. Each loss layer's
    prediction blob is a model output with Caffe's loss (and ``loss_weight``),
    each Accuracy layer a metric on its prediction. Targets for ``fit`` are
    the label blobs: one array, or with several outputs a dict keyed by
    prediction blob (``model.caffe_training.labels`` maps prediction -> label
    blob). Class-index labels drop the class axis ((N,) or (N, H, W)); dense
    targets (EuclideanLoss, SigmoidCrossEntropyLoss) are in the model's layout.
    """
    spec = getattr(model, "caffe_training", None)
    if not spec:
        raise CaffeImportError(
            f"model {model.name!r} has no loss or Accuracy layers: import the net with phase='TRAIN'"
        )
    names = [n for n in model.caffe_outputs if n in spec.labels]
    if len(model.caffe_outputs) == 1:
        name = model.caffe_outputs[0]
        loss, weight = spec.losses.get(name, (None, 1.0))
        return {"loss": loss, "loss_weights": weight, "metrics": spec.metrics.get(name, [])}
    return {
        "loss": {n: spec.losses[n][0] for n in names if n in spec.losses},
        "loss_weights": {n: spec.losses[n][1] for n in names if n in spec.losses},
        "metrics": {n: spec.metrics[n] for n in names if n in spec.metrics},
    }
