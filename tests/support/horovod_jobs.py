"""Running real multi-process Horovod jobs from the tests.

``horovodrun(args, np=2)`` starts ``horovodrun -np N -H localhost:N --gloo``
with this interpreter, bounded by a timeout (a hang fails the test). Tests
that need Horovod call ``require_horovod()``: it skips where Horovod is not
installed unless ``KERAS_CAFFE_EXPECT_HOROVOD=1``, which ``make test`` and
``make test-compat`` set (both build Horovod with ``keras-caffe
install-horovod``): there a missing Horovod fails.

Each launch costs TensorFlow imports (two in ``horovodrun`` itself, which
checks its build in forked processes, one per worker) and Horovod's start:
``Cases`` runs several scripts one after another in one launch (this file
is then the launched program) and tells each test its own case's outcome
and output.
"""

import importlib.util
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIT_WORKER = HERE / "fit_worker.py"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}


def have_horovod():
    return importlib.util.find_spec("horovod") is not None


def require_horovod():
    import pytest

    if have_horovod():
        return
    if os.environ.get("KERAS_CAFFE_EXPECT_HOROVOD") == "1":
        pytest.fail("Horovod is not installed but KERAS_CAFFE_EXPECT_HOROVOD=1")
    pytest.skip("Horovod not installed (keras-caffe install-horovod builds it; make test does)")


def horovodrun_exe():
    return str(Path(sys.executable).parent / "horovodrun")


def environment(**extra):
    env = dict(os.environ)
    env.update(QUIET)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _cwd(cwd):
    """A child's working directory: never the repository root, where ``-c``
    and ``-m`` would import the source tree instead of the installed wheel."""
    return cwd if cwd is not None else tempfile.gettempdir()


def note_launch(kind):
    """With ``KERAS_CAFFE_LAUNCH_LOG=PATH``: append ``<test id> <kind>`` to
    PATH for each process these helpers start (launches per file are the
    cost measure that machine load does not blur)."""
    log = os.environ.get("KERAS_CAFFE_LAUNCH_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(log, "a") as f:
            f.write(f"{test} {kind}\n")


def horovodrun(args, np=2, timeout=240, env=None, cwd=None):
    """``horovodrun -np {np}`` running ``python args...``; returns the
    CompletedProcess (stdout and stderr merged into ``.stdout``)."""
    note_launch("horovodrun")
    command = [horovodrun_exe(), "-np", str(np), "-H", f"localhost:{np}", "--gloo",
               sys.executable, *map(str, args)]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=environment(**(env or {})), cwd=_cwd(cwd))


def discovery_script(path, *hosts, when=None):
    """An executable host-discovery script at ``path`` printing ``hosts``
    (``"localhost:1"``...); ``when={host: file}`` lists a host only while
    ``file`` exists. Horovod runs every name that resolves to this machine
    locally (no ssh), so ``localhost`` and ``127.0.0.1`` are two "hosts"
    here: one can be blacklisted after its worker dies while the other
    carries on."""
    when = when or {}
    lines = ["#!/bin/sh"]
    for host in hosts:
        name = host.split(":")[0]
        if name in when:
            lines.append(f"[ -e '{when[name]}' ] && echo {host}")
        else:
            lines.append(f"echo {host}")
    path = Path(path)
    path.write_text("\n".join(lines) + "\nexit 0\n")
    path.chmod(0o755)
    return path


def horovodrun_elastic(args, discovery, np=2, min_np=1, max_np=2, timeout=240, env=None,
                       cwd=None):
    """An elastic ``horovodrun`` (``--min-np``/``--max-np``, a host-discovery
    script) running ``python args...``; ``--network-interface lo`` so a job
    may start on one host."""
    note_launch("horovodrun-elastic")
    command = [horovodrun_exe(), "-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
               "--host-discovery-script", str(discovery), "--network-interface", "lo", "--gloo",
               sys.executable, *map(str, args)]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=environment(**(env or {})), cwd=_cwd(cwd))


def python(args, timeout=240, env=None, cwd=None):
    """``python args...`` in a fresh process (no Horovod launcher)."""
    note_launch("python")
    return subprocess.run([sys.executable, *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=environment(**(env or {})), cwd=_cwd(cwd))


def check(result):
    if result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}:\n{result.stdout[-6000:]}")
    return result


def caffemodel(path):
    """``{layer: [blobs as arrays]}`` of a caffemodel a job wrote (either format)."""
    from keras_caffe.importers.net.weights import load_weights

    return {name: [np.asarray(b) for b in blobs] for name, blobs in load_weights(path).items()}


# -- several cases in one launch -------------------------------------------------------------

#: Printed by the case runner on stdout and on stderr (each its own ordered
#: stream under horovodrun) when a case starts.
CASE_MARK = "@@keras-caffe-tests case "
#: horovodrun's prefix of a worker's line.
_PREFIX = re.compile(r"\[\d+\]<std(out|err)>:")


class Cases:
    """Several runs ("cases") of ``python args...`` in one process per
    worker: one ``horovodrun`` (or one plain ``python``) launch of this file,
    which runs the cases in order, each as its own ``__main__`` (a script
    path, or ``-m module``) with its own ``sys.argv``, working directory and
    environment additions, the Keras session cleared in between (float32
    policy, fresh auto-names; the scripts seed themselves). A case that fails
    is reported and the next one runs; only the last case may be added with
    ``fails=True``: its error (or its death) ends the launch, so the launch's
    exit status is that case's.

    Each case has its own time limit (``timeout``, from when a worker
    starts it; before the first case, ``STARTUP`` for the launcher): past
    it the launch is stopped, and that case and the ones after it fail
    while those before keep their results.

    ``ok(name)`` asserts the case finished on every worker and returns its
    output (the lines each worker wrote while it ran, horovodrun's prefixes
    kept); ``failure(name)`` gives the failing last case's
    ``CompletedProcess``: the launch's exit status, with the case's output
    (and the launcher's closing lines) as ``stdout``.
    """

    STARTUP = 240

    def __init__(self, folder):
        self.folder = Path(folder)
        self.cases = []
        self.result = None
        self.timed_out = None
        self.np = 1

    def add(self, name, args, env=None, cwd=None, fails=False, rank=None, plain=False,
            timeout=240):
        """Case ``name``: ``python args...`` (``args[0]`` a script, or
        ``"-m", module``), on worker ``rank`` only if given (the others go
        on to the next case). ``plain``: run as a process that horovodrun
        did not start: without its ``HOROVOD_*`` variables, and before
        anything in the process imported Horovod (the runner checks), so a
        one-process reference can ride along in a horovodrun launch."""
        assert name not in [case["name"] for case in self.cases], name
        assert not (self.cases and self.cases[-1]["fails"]), "a failing case must be the last"
        self.cases.append({"name": name, "args": [str(a) for a in args],
                           "env": {k: str(v) for k, v in (env or {}).items()},
                           "cwd": str(cwd) if cwd is not None else None, "fails": fails,
                           "rank": rank, "plain": plain, "timeout": timeout})
        return self

    def __contains__(self, name):
        return any(case["name"] == name for case in self.cases)

    def horovodrun(self, np=2, env=None, cwd=None):
        """Run the cases under ``horovodrun -np {np}`` (as ``horovodrun()``)."""
        self.np = np
        return self._launch([horovodrun_exe(), "-np", str(np), "-H", f"localhost:{np}", "--gloo",
                             sys.executable], env, cwd)

    def python(self, env=None, cwd=None):
        """Run the cases in one plain ``python`` process (as ``python()``)."""
        self.np = 1
        return self._launch([sys.executable], env, cwd)

    def _launch(self, command, env, cwd):
        self.folder.mkdir(parents=True, exist_ok=True)
        spec = self.folder / "cases.json"
        spec.write_text(json.dumps({"status": str(self.folder / "status"), "cases": self.cases}))
        note_launch(f"{'horovodrun' if self.np > 1 else 'python'} ({len(self.cases)} cases)")
        order = [case["name"] for case in self.cases]
        limits = {case["name"]: case["timeout"] for case in self.cases}
        lines, started, news, lock = [], {}, threading.Event(), threading.Lock()
        process = subprocess.Popen([*command, str(Path(__file__).resolve()), str(spec)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=environment(**(env or {})), cwd=_cwd(cwd),
                                   start_new_session=True)

        def read():
            for line in process.stdout:
                lines.append(line)
                name = _marked(line)
                if name in limits and name not in started:
                    with lock:
                        started[name] = time.monotonic()
                    news.set()
            news.set()  # the output ended: the launch is over

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        launched = time.monotonic()
        while True:  # each case bounded by its own limit, from when a worker starts it
            news.clear()
            if not reader.is_alive():
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.timed_out = "the launcher did not exit within 60 s of its output's end"
                    _stop(process)
                break
            with lock:
                running = max(started, key=order.index) if started else None
            deadline = (launched + self.STARTUP if running is None
                        else started[running] + limits[running])
            if not news.wait(timeout=max(0.0, deadline - time.monotonic())):
                self.timed_out = (f"case {running} ran over {limits[running]} s" if running
                                  else f"no case started within {self.STARTUP} s")
                _stop(process)
                break
        reader.join()
        process.stdout.close()
        self.result = subprocess.CompletedProcess(process.args, process.returncode,
                                                  "".join(lines))
        return self

    def output(self, name):
        """The lines written while case ``name`` ran (markers left out),
        horovodrun's prefixes kept: each worker's stdout and stderr are
        followed apart (the launcher interleaves them), the launcher's own
        lines go with the latest case started; so the last case's output
        ends with the launcher's closing lines."""
        assert name in self, name
        order = [case["name"] for case in self.cases]
        current, latest, lines = {}, None, []
        for line in self.result.stdout.splitlines(keepends=True):
            prefixed = _PREFIX.match(line)
            stream = prefixed.group(0) if prefixed else None
            started = _marked(line)
            if started in order:
                current[stream] = started
                if latest is None or order.index(started) > order.index(latest):
                    latest = started
                continue
            if (current.get(stream, latest) if prefixed else latest) == name:
                lines.append(line)
        return "".join(lines)

    def _statuses(self, name):
        case = next(case for case in self.cases if case["name"] == name)
        found = {}
        for rank in range(self.np) if case["rank"] is None else [case["rank"]]:
            path = self.folder / "status" / f"{name}.rank{rank}.json"
            found[rank] = json.loads(path.read_text()) if path.is_file() else None
        return found

    def ok(self, name):
        """Case ``name``'s output, once it finished on every worker."""
        assert self.result is not None, "the cases have not run"
        statuses = self._statuses(name)
        out = self.output(name)
        if any(s is None or not s["ok"] for s in statuses.values()):
            how = self.timed_out or f"exit {self.result.returncode}"
            errors = "\n".join(f"rank {r}: {s['error'] if s else 'did not finish'}"
                               for r, s in statuses.items() if not (s and s["ok"]))
            raise AssertionError(f"case {name} failed (launch: {how}):\n{errors}\n"
                                 f"{out[-6000:]}")
        return out

    def failure(self, name):
        """The launch's ``CompletedProcess`` with case ``name``'s output: for
        the last case, added with ``fails=True``."""
        assert self.cases[-1]["name"] == name and self.cases[-1]["fails"], name
        if self.timed_out:
            raise AssertionError(f"case {name}: the launch was stopped, {self.timed_out}:\n"
                                 f"{self.output(name)[-6000:]}")
        return subprocess.CompletedProcess(self.result.args, self.result.returncode,
                                           self.output(name))


def _marked(line):
    """The case a runner's marker line starts, or None."""
    prefixed = _PREFIX.match(line)
    text = line[prefixed.end():] if prefixed else line
    return text[len(CASE_MARK):].strip() if text.startswith(CASE_MARK) else None


def _stop(process):
    """End a launch that ran over its time: the launcher (which ends its
    workers on SIGTERM) and its process group."""
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def selected(request, *names):
    """Whether a test of ``request``'s module named one of ``names`` (its
    name before parametrization) is among the session's tests (not
    deselected, e.g. by ``-m "not slow"``): a module fixture leaves out the
    cases no selected test reads."""
    return any(getattr(item, "originalname", item.name) in names
               and item.path == request.node.path for item in request.session.items)


def _run_case(case):
    """Run one case as ``__main__`` in this process; its exit status (0: fine)."""
    args = case["args"]
    saved = (list(sys.argv), list(sys.path), os.getcwd(), dict(os.environ))
    if case["plain"]:
        if "horovod.tensorflow" in sys.modules:
            raise RuntimeError(f"case {case['name']}: plain, but Horovod is already imported")
        for key in [key for key in os.environ if key.startswith("HOROVOD_")]:
            del os.environ[key]
    os.environ["KERAS_CAFFE_QUICK_EXIT"] = "0"  # the process runs the next case too
    os.environ.update(case["env"])
    if case["cwd"]:
        os.chdir(case["cwd"])
    try:
        with warnings.catch_warnings():
            if "PYTHONWARNINGS" in case["env"]:  # what the variable does at a process's start
                warnings.simplefilter(case["env"]["PYTHONWARNINGS"])
            try:
                if args[0] == "-m":
                    sys.argv = ["-m", *args[2:]]
                    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
                else:
                    sys.argv = list(args)
                    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
                    runpy.run_path(args[0], run_name="__main__")
            except SystemExit as stop:
                if stop.code not in (None, 0) or case["fails"]:
                    raise
        return 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.argv[:], sys.path[:] = saved[0], saved[1]
        os.chdir(saved[2])
        for key in set(os.environ) - set(saved[3]):
            del os.environ[key]
        for key, value in saved[3].items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        keras = sys.modules.get("keras")
        if keras is not None:  # what a new process starts with
            keras.backend.clear_session(free_memory=False)
            keras.mixed_precision.set_dtype_policy("float32")


def run_cases(spec_path):
    """The case runner (``python horovod_jobs.py CASES.json``, under
    ``horovodrun`` or not): writes ``STATUS/{name}.rank{r}.json`` after each
    case; exits 1 if a case failed (with a last case added with
    ``fails=True``: with that case's exit status)."""
    spec = json.loads(Path(spec_path).read_text())
    status = Path(spec["status"])
    status.mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("HOROVOD_RANK", "0")
    failed = False
    for case in spec["cases"]:
        if case["rank"] is not None and str(case["rank"]) != rank:
            continue
        for stream in (sys.stdout, sys.stderr):
            print(f"{CASE_MARK}{case['name']}", file=stream, flush=True)
        if case["fails"]:  # the last: its error ends this process as it would alone
            _run_case(case)
            report = {"ok": True, "error": None}
        else:
            try:
                _run_case(case)
                report = {"ok": True, "error": None}
            except BaseException as err:  # noqa: B036 - SystemExit too: reported, the next runs
                traceback.print_exc()
                sys.stderr.flush()
                report = {"ok": False, "error": f"{type(err).__name__}: {err}"}
                failed = True
        (status / f"{case['name']}.rank{rank}.json").write_text(json.dumps(report))
    if spec["cases"] and spec["cases"][-1]["fails"]:
        return 0  # the exit status is the last case's, which did not fail
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run_cases(sys.argv[1]))
