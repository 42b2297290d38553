"""keras-caffe's own errors out of a running tf.data pipeline.

Most bad input is found when a pipeline is created. What can only be found
while reading (a record deep in a database that is too big to check up front,
an image file that went missing) is raised inside the tf.data graph, where
TensorFlow turns every Python exception into a ``tf.errors.OpError`` with the
message inside. ``fail`` records the original ``KerasCaffeError`` under a
marker in that message, and ``pipeline_errors`` turns the ``OpError`` back
into it::

    with pipeline_errors():
        model.fit(pipe.dataset(), ...)      # raises LayerError, not InvalidArgumentError

Without the context manager the ``OpError``'s message still carries the
whole keras-caffe message.
"""

import contextlib
import itertools
import re
import threading

_MARK = "[keras-caffe data error #{}]"
_MARK_RE = re.compile(r"\[keras-caffe data error #(\d+)\]")
_LIMIT = 64  # errors kept for translation; older ones are dropped

_lock = threading.Lock()
_counter = itertools.count(1)
_pending = {}


class PipelineFailure(ValueError):
    """What a tf.data pipeline raises inside TensorFlow: the marked message."""


def fail(error):
    """Raise ``error`` (a KerasCaffeError) from inside a ``tf.numpy_function``."""
    with _lock:
        token = next(_counter)
        _pending[token] = error
        while len(_pending) > _LIMIT:
            _pending.pop(next(iter(_pending)))
    raise PipelineFailure(f"{error} {_MARK.format(token)}")


def original_error(error):
    """The KerasCaffeError recorded for an ``OpError`` (or ``None``)."""
    match = _MARK_RE.search(str(getattr(error, "message", "") or error))
    if not match:
        return None
    with _lock:
        return _pending.get(int(match.group(1)))


@contextlib.contextmanager
def pipeline_errors():
    """Re-raise errors raised inside keras-caffe pipelines as the KerasCaffeError
    they were (``LayerError`` naming the layer, record key or file)."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as err:
        original = original_error(err)
        if original is None:
            raise
        raise original from None
