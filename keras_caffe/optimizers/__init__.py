"""The six Caffe solvers as Keras optimizers."""

from keras_caffe.optimizers.adadelta import AdaDelta
from keras_caffe.optimizers.adagrad import AdaGrad
from keras_caffe.optimizers.adam import Adam
from keras_caffe.optimizers.base import CaffeOptimizer
from keras_caffe.optimizers.nesterov import Nesterov
from keras_caffe.optimizers.rmsprop import RMSProp
from keras_caffe.optimizers.sgd import SGD
from keras_caffe.optimizers.yellowfin import YellowFin

#: Solver ``type`` string -> optimizer class.
SOLVERS = {cls.caffe_type: cls for cls in (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam)}

__all__ = ["CaffeOptimizer", "SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam",
           "YellowFin", "SOLVERS"]
