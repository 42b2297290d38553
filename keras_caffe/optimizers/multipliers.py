"""Per-variable ``lr_mult`` / ``decay_mult``, Caffe's ``param { }`` settings.

A multiplier spec is a dict from a Keras variable path (``"ip1/kernel"``,
``"ip1/bias"``) or a glob pattern over paths (``"conv*/bias"``, ``"*/bias"``)
to a float. A variable takes the value of its exact path if listed, else of
the first pattern (in the dict's order) that matches, else 1.
"""

import fnmatch
import warnings

from keras_caffe._checks import check_number
from keras_caffe.errors import ArgumentError


def validate(owner, name, spec):
    """Check a multiplier spec; return it as a plain dict (``{}`` for None)."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ArgumentError(
            owner, name, f"must be a dict from variable path or pattern to float, got {spec!r}"
        )
    checked = {}
    for key, value in spec.items():
        if not isinstance(key, str) or not key:
            raise ArgumentError(owner, name, f"keys must be variable paths or patterns, got {key!r}")
        checked[key] = check_number(owner, f"{name}[{key!r}]", value)
    return checked


def resolve(owner, name, spec, variables):
    """One multiplier per variable, in order; warns about unmatched entries."""
    used = set()
    values = []
    for variable in variables:
        path = variable.path
        if path in spec:
            key = path
        else:
            key = next((k for k in spec if fnmatch.fnmatchcase(path, k)), None)
        if key is not None:
            used.add(key)
        values.append(spec[key] if key is not None else 1.0)
    unused = [k for k in spec if k not in used]
    if unused:
        sample = ", ".join(v.path for v in variables[:8])
        warnings.warn(
            f"{owner}: {name} entries {unused} match no trainable variable "
            f"(variables: {sample}{', ...' if len(variables) > 8 else ''})",
            stacklevel=3,
        )
    return values
