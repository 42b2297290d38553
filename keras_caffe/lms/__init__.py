"""Large Model Support: ``LMS`` (``policy``), the activation graph and plan
(``plan``), rematerialized and host-staged blocks (``execution``)."""

from keras_caffe.lms.plan import LayerLimitError
from keras_caffe.lms.policy import LMS

__all__ = ["LMS", "LayerLimitError"]
