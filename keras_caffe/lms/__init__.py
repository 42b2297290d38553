"""Large Model Support: ``LMS`` (``policy``), the activation graph and plan
(``plan``), rematerialized and host-staged blocks (``execution``)."""

from keras_caffe.backends import require_tensorflow_backend

# Built on TensorFlow: on another Keras backend, one line saying so (keras_caffe.backends).
require_tensorflow_backend('keras_caffe.lms (Large Model Support)')

from keras_caffe.lms.plan import LayerLimitError
from keras_caffe.lms.policy import LMS

__all__ = ["LMS", "LayerLimitError"]
