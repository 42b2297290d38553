"""``ElasticCommit``: commit an elastic state from ``model.fit``.

Under ``keras_caffe.distributed.elastic.run`` a lost worker sends the
survivors back to the last commit; committing more often loses fewer
iterations and costs a host copy of the weights and optimizer state (and,
with more than one worker, one small broadcast: Horovod's check for added
or removed hosts, which raises ``HostsUpdatedInterrupt`` out of ``fit``
when there are).
"""

import keras

from keras_caffe.backends import require_tensorflow_backend
from keras_caffe.errors import ArgumentError

# Horovod's elastic training runs on TensorFlow: on another Keras backend, one
# line saying so (keras_caffe.backends).
require_tensorflow_backend("keras_caffe.callbacks.ElasticCommit (Horovod)")


class ElasticCommit(keras.callbacks.Callback):
    """``state.commit()`` after every ``every``-th iteration (the optimizer's
    counter, so the points do not move when ``fit`` restarts after a reset)
    and, with ``on_epoch_end=True``, after each epoch.

    Args:
        state: a ``keras_caffe.distributed.elastic.KerasState`` (anything
            with ``commit()``).
        every: iterations between commits (``>= 1``).
        on_epoch_end: also commit when an epoch ends.
    """

    def __init__(self, state, every=100, on_epoch_end=False):
        super().__init__()
        if not callable(getattr(state, "commit", None)):
            raise ArgumentError("ElasticCommit", "state", "must have a commit() method (a "
                                "keras_caffe.distributed.elastic.KerasState), got "
                                f"{type(state).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ArgumentError("ElasticCommit", "every", f"must be an integer >= 1, got {every!r}")
        self.state = state
        self.every = every
        self.commit_on_epoch_end = bool(on_epoch_end)

    def _iterations(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        if self._iterations() % self.every == 0:
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        if self.commit_on_epoch_end:
            self.state.commit()
