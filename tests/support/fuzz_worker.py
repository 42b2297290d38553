"""One fuzz target's cases, run in one process (``tests/test_fuzz.py`` starts it).

``python fuzz_worker.py TARGET FIRST COUNT OUT_DIR``

Each case mutates a real file (the golden Caffe files, or a snapshot this
worker writes) with ``random.Random(seed)`` and hands it to the public API
the way a user would. Per case it appends one JSON line to
``OUT_DIR/TARGET.jsonl``: ``{"seed", "outcome", "detail"}``, where outcome
is ``ok`` (accepted), ``refused`` (a ``KerasCaffeError``), or ``escaped``
(anything else: the type, message and innermost keras_caffe frame), and
``OUT_DIR/TARGET.progress`` names the case running, so a crash or a hang
points at its seed. The parent sets this process's memory rlimit.
"""

import contextlib
import io
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

#: The golden data: tests/golden (test_fuzz passes it; the full ../shared/golden works too).
GOLDEN = Path(os.environ.get("KERAS_CAFFE_GOLDEN", Path(__file__).resolve().parents[1] / "golden"))
EXTREMES = ["0", "-1", "2147483648", "9223372036854775807", "1e308", "nan", "-inf", "1000000000",
            "3", "65535", ""]


# -- mutations --------------------------------------------------------------------------------

def mutate_bytes(data, rng):
    data = bytearray(data)
    kind = rng.choice(["flip", "flip", "truncate", "insert", "duplicate", "varint", "zero"])
    if not data:
        return bytes(rng.randbytes(8))
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "insert":
        at = rng.randrange(len(data))
        data[at:at] = rng.randbytes(rng.randint(1, 16))
    elif kind == "duplicate":
        start = rng.randrange(len(data))
        chunk = data[start:start + rng.randint(1, 256)]
        at = rng.randrange(len(data))
        data[at:at] = chunk
    elif kind == "varint":  # a length or count of 2^63-ish
        at = rng.randrange(len(data))
        data[at:at + 9] = b"\xff" * 8 + b"\x7f"
    else:
        start = rng.randrange(len(data))
        data[start:start + rng.randint(1, 64)] = bytes(rng.randint(1, 64))
    return bytes(data)


def mutate_text(text, rng):
    import re

    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["number", "number", "number", "delete", "duplicate", "swap", "garbage",
                           "truncate"])
        if kind == "number":
            spots = [m for m in re.finditer(r"-?\d+(\.\d+)?(e-?\d+)?", "\n".join(lines))]
            if spots:
                joined = "\n".join(lines)
                m = rng.choice(spots)
                joined = joined[:m.start()] + rng.choice(EXTREMES) + joined[m.end():]
                lines = joined.splitlines()
        elif kind == "delete" and lines:
            del lines[rng.randrange(len(lines))]
        elif kind == "duplicate" and lines:
            i = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines)), lines[i])
        elif kind == "swap":
            words = re.findall(r"[A-Za-z_]+", "\n".join(lines))
            if words:
                a, b = rng.choice(words), rng.choice(words)
                joined = "\n".join(lines).replace(a, b, 1)
                lines = joined.splitlines()
        elif kind == "garbage" and lines:
            i = rng.randrange(len(lines))
            at = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:at] + rng.choice(["{", "}", "\"", ":", "\\", "\0", "é", "#"]) + \
                lines[i][at:]
        elif kind == "truncate" and lines:
            del lines[rng.randrange(len(lines)):]
    return "\n".join(lines) + "\n"


# -- targets: each (rng, work dir) -> None (or "refused"), raising what the API raises ---------

def target_prototxt(rng, work):
    import keras_caffe
    from keras_caffe.analysis import analyze

    name = rng.choice(["lenet", "cifar10_quick", "squeezenet_v1.1", "mobilenet_v1"])
    text = mutate_text((GOLDEN / "forward" / name / "deploy_used.prototxt").read_text(), rng)
    analyze(text)
    keras_caffe.import_model(text)


def target_caffemodel(rng, work):
    from keras_caffe.importers.net.weights import load_weights

    path = work / "w.caffemodel"
    path.write_bytes(mutate_bytes((GOLDEN / "forward" / "lenet" / "weights.caffemodel")
                                  .read_bytes(), rng))
    load_weights(path)


def _lenet_h5(work):
    import h5py

    from keras_caffe.importers.net.weights import load_weights

    path = work / "clean.caffemodel.h5"
    if not path.exists():
        weights = load_weights(GOLDEN / "forward" / "lenet" / "weights.caffemodel")
        with h5py.File(path, "w") as f:
            data = f.create_group("data")
            for layer, blobs in weights.items():
                group = data.create_group(layer)
                for i, blob in enumerate(blobs):
                    group[str(i)] = blob
    return path.read_bytes()


def target_caffemodel_h5(rng, work):
    from keras_caffe.importers.net.weights import load_weights

    path = work / "w.caffemodel.h5"
    path.write_bytes(mutate_bytes(_lenet_h5(work), rng))
    load_weights(path)


def target_solver(rng, work):
    import keras_caffe

    folder = work / "solver"
    if not folder.exists():
        shutil.copytree(GOLDEN / "solvers" / "sgd", folder, ignore=shutil.ignore_patterns("bin_run"))
    text = mutate_text((GOLDEN / "solvers" / "sgd" / "solver.prototxt").read_text(), rng)
    (folder / "fuzz_solver.prototxt").write_text(text)
    keras_caffe.optimizer_from_solver(folder / "fuzz_solver.prototxt")
    with contextlib.chdir(folder):
        solver = keras_caffe.Solver("fuzz_solver.prototxt", weights="init.caffemodel", log=None)
        solver.step(1)


_SNAP_NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 20 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1" inner_product_param { num_output: 16 } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 5 } }
"""
_SNAPSHOTS = {}


def _snapshot_model():
    import keras_caffe

    model = keras_caffe.import_model(_SNAP_NET, phase="TRAIN")
    optimizer = keras_caffe.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _snapshot_target(fmt):
    def run(rng, work):
        from keras_caffe.importers.snapshots.files import load_snapshot, save_snapshot

        folder = work / f"snap_{fmt}"
        if fmt not in _SNAPSHOTS:
            clean = work / f"clean_{fmt}"
            clean.mkdir()
            model, optimizer = _snapshot_model()
            with contextlib.chdir(clean):  # Caffe's learned_net: the relative path written
                files = save_snapshot(model, optimizer, "snap", 0, format=fmt,
                                      state={"positions": [3]})
            _SNAPSHOTS[fmt] = {"state": (clean / files.solverstate).read_bytes(),
                               "weights": (clean / files.weights).read_bytes(),
                               "names": (Path(files.solverstate).name, Path(files.weights).name)}
            shutil.rmtree(clean)
        clean = _SNAPSHOTS[fmt]
        case = folder / f"case{rng.randrange(10 ** 9)}"
        case.mkdir(parents=True)
        state_name, weights_name = clean["names"]
        which = rng.choice(["state", "state", "weights"])
        for key, name in (("state", state_name), ("weights", weights_name)):
            data = clean[key]
            (case / name).write_bytes(mutate_bytes(data, rng) if key == which else data)
        model, optimizer = _snapshot_model()
        with contextlib.chdir(case):
            load_snapshot(state_name, model, optimizer)
        shutil.rmtree(case)
    return run


def target_lmdb(rng, work):
    import lmdb

    from keras_caffe.importers import net_pipeline

    folder = work / f"lmdb{rng.randrange(10 ** 9)}"
    shutil.copytree(GOLDEN / "lmdb", folder, ignore=shutil.ignore_patterns("*.npz", "*.log"))
    env = lmdb.open(str(folder / "images_lmdb"), subdir=True, readonly=False, lock=False)
    with env.begin(write=True) as txn:
        keys = [k for k, _ in txn.cursor()]
        for key in rng.sample(keys, min(len(keys), rng.randint(1, 3))):
            txn.put(key, mutate_bytes(txn.get(key), rng))
    env.close()
    with contextlib.chdir(folder):
        pipe = net_pipeline("net_A_train_meanvalue.prototxt", "TRAIN")
        for _, _ in zip(range(3), pipe.dataset()):
            pass
    shutil.rmtree(folder)


def target_cli(rng, work):
    from keras_caffe import cli

    folder = work / f"cli{rng.randrange(10 ** 9)}"
    folder.mkdir()
    net = (GOLDEN / "forward" / "lenet" / "deploy_used.prototxt").read_text()
    if rng.random() < 0.6:  # else the sound net, so that -o files are written and checked too
        net = mutate_text(net, rng)
    (folder / "net.prototxt").write_text(net)
    weights = (GOLDEN / "forward" / "lenet" / "weights.caffemodel").read_bytes()
    (folder / "w.caffemodel").write_bytes(mutate_bytes(weights, rng) if rng.random() < 0.5
                                           else weights)
    command = rng.choice([
        ["import", "net.prototxt", "-o", "out.keras"],
        ["import", "net.prototxt", "--weights", "w.caffemodel", "-o", "out.keras"],
        ["analyze", "net.prototxt"],
        ["analyze", "net.prototxt", "--batch", rng.choice(["0", "-3", "1e9", "x", "64"])],
        ["time", "--model", "net.prototxt", "--phase", "TEST", "--iterations",
         rng.choice(["0", "-1", "2"])],
        ["import", "missing.prototxt", "-o", "out.keras"],
        ["train", "--solver", "net.prototxt"],
    ])
    stderr = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stderr(stderr), \
            contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(command)
        except SystemExit as stop:  # argparse's usage errors
            code = stop.code
    text = stderr.getvalue()
    if "Traceback" in text:
        raise AssertionError(f"traceback on stderr for {command}: {text[-800:]}")
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith(".tmp") or ".tmp-" in p.name]
    if leftovers:
        raise AssertionError(f"{command} left temporary files {leftovers}")
    out = folder / "out.keras"
    if out.exists() and code not in (0, None):
        raise AssertionError(f"{command} failed (exit {code}) but left {out.name}")
    if out.exists():
        import keras

        keras.saving.load_model(out)  # a complete file
    shutil.rmtree(folder)
    return "ok" if code in (0, None) else "refused"  # exit 1/2: the CLI's one-line error


TARGETS = {
    "prototxt": target_prototxt, "caffemodel": target_caffemodel,
    "caffemodel_h5": target_caffemodel_h5, "solver": target_solver,
    "solverstate_caffe": _snapshot_target("caffe"),
    "solverstate_hdf5": _snapshot_target("caffe_hdf5"),
    "solverstate_keras": _snapshot_target("keras"), "lmdb": target_lmdb, "cli": target_cli,
}


def innermost_package_frame(err):
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "keras_caffe" in f.filename]
    if not frames:
        return "no keras_caffe frame"
    f = frames[-1]
    return f"{f.filename.split('keras_caffe/')[-1]}:{f.lineno}"


def main():
    name, first, count, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras_caffe  # noqa: F401
    from keras_caffe.errors import KerasCaffeError

    target = TARGETS[name]
    results = out / f"{name}.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in range(first, first + count):
            (out / f"{name}.progress").write_text(str(seed))
            rng = random.Random(f"{name}-{seed}")
            try:
                outcome, detail = target(rng, work) or "ok", ""
            except KerasCaffeError as err:
                outcome, detail = "refused", f"{type(err).__name__}: {str(err)[:200]}"
            except Exception as err:  # noqa: BLE001 - what the fuzzer looks for
                outcome = "escaped"
                detail = (f"{type(err).__name__}: {str(err)[:300]} "
                          f"({innermost_package_frame(err)})")
            with results.open("a") as f:
                f.write(json.dumps({"seed": seed, "outcome": outcome, "detail": detail}) + "\n")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (out / f"{name}.done").write_text(json.dumps({"peak_kib": peak}))


if __name__ == "__main__":
    main()
