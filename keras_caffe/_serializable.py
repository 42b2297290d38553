"""One way to register keras-caffe objects with Keras's serialization."""

import keras

from keras_caffe.errors import KerasCaffeError

PACKAGE = "keras_caffe"


def register(cls):
    """``keras.saving.register_keras_serializable(package="keras_caffe")``,
    refusing a name another keras-caffe object already holds (Keras would
    silently let the later one win, and saved files would load the wrong class)."""
    name = f"{PACKAGE}>{cls.__name__}"
    existing = keras.saving.get_custom_objects().get(name)
    if existing is not None and existing is not cls and (
            existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
        raise KerasCaffeError(f"{name} is already registered by {existing.__module__}."
                              f"{existing.__qualname__}; give {cls.__module__}.{cls.__qualname__} "
                              "another class name")
    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)
