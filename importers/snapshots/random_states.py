"""The model's random-generator states (Keras ``SeedGenerator``s: Dropout's),
which snapshots store so a resumed run draws the masks an uninterrupted run
draws, and which data-parallel workers offset by rank.

Each Keras backend keeps the state in its own integer type (TensorFlow
int64, JAX uint32, PyTorch int32) and draws with its own generator: the
stored numbers restore on any backend, cast to its type, and the masks they
draw are that backend's."""

import numpy as np

_SEED_STATE = "seed_generator_state"


def seed_variables(model):
    """The model's Keras random-generator states (``SeedGenerator`` variables)."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables
            if id(v) not in weights and v.path.rsplit("/", 1)[-1] == _SEED_STATE]


def random_states(model):
    """``{path: [seed, counter]}`` of the model's random generators (JSON-ready)."""
    return {v.path: np.asarray(v.numpy()).tolist() for v in seed_variables(model)}


def restore_random_states(model, stored):
    """Assign ``stored`` (what ``random_states`` returned) to the model's
    random generators; paths the model does not have are ignored."""
    variables = {v.path: v for v in seed_variables(model)}
    for path, value in (stored or {}).items():
        if path in variables:
            variables[path].assign(np.asarray(value, variables[path].dtype))
