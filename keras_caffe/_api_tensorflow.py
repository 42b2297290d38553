"""keras-caffe's public names that need Keras's TensorFlow backend: Caffe's
training loop and Large Model Support. ``keras_caffe/__init__.py`` imports
them with ``keras_caffe._api`` on that backend; on another,
``keras_caffe.Solver`` and the rest raise ``TensorFlowRequirementError``
(``keras_caffe.backends``).
"""

from keras_caffe.lms.policy import LMS
from keras_caffe.training.solver import Solver, get_solver

__all__ = ["LMS", "Solver", "get_solver"]
