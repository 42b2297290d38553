"""The Solver's resume state, as a snapshot carries it, validated like user input.

``make_state()`` makes ``{"version", "seed", "net", "train_batches",
"tests_done", "test_batches", "rng"}``, which the Solver writes into every
snapshot (JSON, beside Caffe's own fields). A resume reads it back from a
file that may be broken or hostile, so each value is checked (type and
range) before anything changes: a position must be an integer a
``tf.data`` counter can hold, the test positions one per test net, the
random-generator states pairs of integers. Any other value is a
``SnapshotError`` naming the file and the key. A snapshot without it
(Caffe's own) gives its positions by its iteration (``caffe_positions``).
"""

from keras_caffe.importers.snapshots.file_io import SnapshotError

#: The format of the state ``make_state()`` makes; ``check`` refuses any other.
VERSION = 1
#: The largest data position accepted (batches; tf.data counts in int64).
MAX_POSITION = 2 ** 62
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _is_int(value, low, high):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _positions(value, count):
    return isinstance(value, list) and len(value) == count and \
        all(_is_int(v, 0, MAX_POSITION) for v in value)


def _rng(value):
    return isinstance(value, dict) and all(
        isinstance(path, str) and isinstance(pair, list) and len(pair) == 2
        and all(_is_int(v, *_INT64) for v in pair) for path, pair in value.items())


def make_state(*, seed, net, train_batches, tests_done, test_batches, rng):
    """The resume state of a Solver: its data ``seed``, its train net's
    name, the data positions (batches read by the train stream, tests run,
    batches read by each test stream) and the random-generator states."""
    return {"version": VERSION, "seed": seed, "net": net, "train_batches": train_batches,
            "tests_done": tests_done, "test_batches": list(test_batches), "rng": rng}


def caffe_positions(param, iteration):
    """``(tests_done, train_batches, test_batches)`` after ``iteration``
    iterations of the solver ``param``: what a snapshot without a resume
    state (Caffe's own) implies, as Caffe's loop reads and tests."""
    tests = 0
    if param.test_interval:
        tests = sum(1 for t in range(0, iteration, param.test_interval)
                    if t > 0 or param.test_initialization)
    return tests, iteration * param.iter_size, [tests * n for n in param.test_iter]


def check(path, state, test_nets, version=VERSION):
    """``state`` if it is a valid resume state of format ``version`` for a
    solver with ``test_nets`` test nets, or holds none (Caffe's own
    snapshot, ``model.fit``'s); else ``SnapshotError(path, ...)``."""
    if "version" not in state:
        return state
    if state["version"] != version:
        raise SnapshotError(path, f"solver state version {_short(state['version'])}: this "
                            f"keras-caffe reads version {version}")
    rules = {
        "seed": (lambda v: _is_int(v, *_INT64), "an integer"),
        "net": (lambda v: isinstance(v, str), "a string"),
        "train_batches": (lambda v: _is_int(v, 0, MAX_POSITION),
                          "an integer in [0, 2^62]"),
        "tests_done": (lambda v: _is_int(v, 0, MAX_POSITION), "an integer in [0, 2^62]"),
        "test_batches": (lambda v: _positions(v, test_nets),
                         f"a list of {test_nets} integers in [0, 2^62] (one per test net)"),
        "rng": (_rng, "a dict of [seed, counter] integer pairs"),
    }
    for key, (valid, expected) in rules.items():
        if key not in state:
            raise SnapshotError(path, f"corrupt solver state: no {key!r}")
        if not valid(state[key]):
            raise SnapshotError(path, f"corrupt solver state: {key!r} is {_short(state[key])}, "
                                f"expected {expected}")
    return state


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
