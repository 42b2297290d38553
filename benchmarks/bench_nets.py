"""Nets shared by the benchmarks (imported from the scripts' own folder)."""

import keras


def resnet20():
    """He et al.'s CIFAR ResNet-20 (conv + BatchNorm + ReLU, 0.27M parameters)."""
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for stage, width in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage > 0 and block == 0 else 1
            y = keras.layers.Conv2D(width, 3, stride, padding="same", use_bias=False)(x)
            y = keras.layers.ReLU()(keras.layers.BatchNormalization()(y))
            y = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(y)
            y = keras.layers.BatchNormalization()(y)
            if stride != 1 or x.shape[-1] != width:
                x = keras.layers.Conv2D(width, 1, stride, use_bias=False)(x)
            x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="resnet20")
