"""The built-in converters; importing this package registers them all."""

from keras_caffe.importers.converters import (  # noqa: F401
    io,
)
