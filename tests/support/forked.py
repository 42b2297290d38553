"""Fresh ``python`` processes for the tests, without TensorFlow's import in each.

``python -c ...`` or ``python -m keras_caffe ...`` spends seconds of CPU
importing TensorFlow before it does anything. A *zygote* pays that once: a
Python process that imports keras_caffe (hence TensorFlow and Keras) and
then only waits. Each child is ``os.fork()``-ed from it and runs its
command line (``-c`` code, ``-m`` module or a script, with its arguments)
as ``python`` would run it after those imports (``-m keras_caffe[.cli]``
with the command line's quiet start, ``keras_caffe._cli_quiet``), then exits
as the interpreter does (``SystemExit``'s code, 1 and a traceback for an
exception, death by SIGINT for an uncaught ``KeyboardInterrupt``; threads
joined, ``atexit`` handlers run). A child is a real process of its own: its
pid, exit status, signals, resource limits, environment, working directory
and output files. TensorFlow's runtime starts in the child: the zygote runs
no TensorFlow op, so no device, allocator or thread pool exists before the
fork, and what TensorFlow reads when it makes its devices
(``TF_CPU_ALLOCATOR_USE_BFC``, the logical CPU devices) it reads in the
child. The fork is safe: besides its main thread the zygote has only
OpenBLAS's, which fork cleanly (``_serve`` checks: no other Python thread,
none of TensorFlow's).

What Python and TensorFlow read as they start and import
(``TF_ENABLE_ONEDNN_OPTS``, ``TF_CPP_MIN_LOG_LEVEL``, ``PYTHONWARNINGS``...)
is the zygote's: a child runs in a zygote started with the same environment
except for the variables of ``LATE``, which are read later, and one zygote
per such environment is kept for the test process (two at most; closed at
its exit). Unlike ``python``, the children of one zygote share its hash
seed and do not print TensorFlow's start-up log lines (the zygote did).

``run(args, ...)`` is ``subprocess.run([sys.executable, *args], ...)``;
``start(args, ...)`` gives a running ``Child`` (``pid``, ``poll``, ``wait``,
``send_signal``, ``kill``, ``returncode``) whose output goes to files or
FIFOs the caller names.
"""

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import time

#: Variables read only after the imports (when TensorFlow makes its CPU
#: device, when keras-caffe decides; pytest's name of the running test): a
#: child may set them as it likes.
LATE = frozenset({"TF_CPU_ALLOCATOR_USE_BFC", "KERAS_CAFFE_CPU_TUNING", "HOROVOD_RANK",
                  "HOROVOD_SIZE", "PYTEST_CURRENT_TEST"})
#: What a zygote imports before it forks.
PRELOAD = ("keras_caffe", "keras_caffe.cli")
#: Seconds a zygote may take to import PRELOAD.
START_TIMEOUT = 300


class _Lines:
    """JSON lines read from a pipe without read-ahead (``select`` sees what is left)."""

    def __init__(self, fd):
        self.fd, self.buffer = fd, b""

    def read(self, timeout=None):
        """The next object; None if none came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("the zygote exited")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


class Zygote:
    """A process that has imported ``PRELOAD`` with environment ``env`` and
    forks a child per request, one at a time."""

    def __init__(self, env):
        self.env = dict(env)
        self.log = tempfile.TemporaryFile()  # its own output: TensorFlow's start-up lines
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=self.env, cwd=tempfile.gettempdir())
        self.replies = _Lines(self.proc.stdout.fileno())
        try:
            ready = self.replies.read(START_TIMEOUT)
        except EOFError:
            ready = None
        if ready != {"ready": True}:
            self.close()
            self.log.seek(0)
            raise RuntimeError(f"the zygote did not start ({ready}): "
                               f"{self.log.read()[-3000:].decode(errors='replace')}")
        self.child = None

    def start(self, args, cwd, env, stdout, stderr):
        if self.child is not None and self.child.returncode is None:  # one at a time
            self.child.kill()
            self.child.wait()
        request = {"args": [os.fspath(a) for a in args], "cwd": os.fspath(cwd),
                   "env": env, "stdout": stdout, "stderr": stderr}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        reply = self.replies.read(START_TIMEOUT)
        if reply is None or "pid" not in reply:
            raise RuntimeError(f"the zygote did not fork: {reply}")
        self.child = Child(self, reply["pid"], args)
        return self.child

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


class Child:
    """A forked child. The zygote reaps it only once its exit status has
    been read here, so ``pid`` names this process, and no other, until
    then (signalling it is safe)."""

    def __init__(self, zygote, pid, args):
        self._zygote, self.pid, self.args, self.returncode = zygote, pid, args, None

    def poll(self):
        return self.wait(timeout=0, _raise=False)

    def fileno(self):
        """Readable (``select``) when the child has exited, or ``poll`` has news."""
        return self._zygote.replies.fd

    def wait(self, timeout=None, _raise=True):
        if self.returncode is None:
            reply = self._zygote.replies.read(timeout)
            if reply is None:
                if _raise:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                return None
            self.returncode = reply["returncode"]
            self._zygote.proc.stdin.write(b'"reap"\n')  # the pid may be reused from here on
            self._zygote.proc.stdin.flush()
        return self.returncode

    def send_signal(self, signum):
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self):
        self.send_signal(9)


_zygotes = {}  # the environment at import -> Zygote, the most recently used last


def _zygote(env):
    key = tuple(sorted((k, v) for k, v in env.items() if k not in LATE))
    zygote = _zygotes.pop(key, None)
    if zygote is None or zygote.proc.poll() is not None:
        while len(_zygotes) >= 2:
            _zygotes.pop(next(iter(_zygotes))).close()
        zygote = Zygote({k: v for k, v in env.items() if k not in LATE})
    _zygotes[key] = zygote
    return zygote


def close_all():
    while _zygotes:
        _zygotes.popitem()[1].close()


atexit.register(close_all)


def start(args, *, cwd=None, env=None, stdout=None, stderr=None):
    """``python *args`` as a forked ``Child``. ``stdout``/``stderr``: a path
    (a file, truncated, or a FIFO), None for /dev/null, or (stderr)
    ``subprocess.STDOUT``."""
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else cwd
    if stderr == subprocess.STDOUT:
        stderr = "STDOUT"
    return _zygote(env).start(args, cwd, env, _path(stdout), _path(stderr))


def _path(target):
    return target if target in (None, "STDOUT") else os.fspath(target)


def run(args, *, cwd=None, env=None, timeout=None, merge=False):
    """``subprocess.run([sys.executable, *args], capture_output=True,
    text=True)`` (``merge``: stderr into stdout), in a forked child."""
    with tempfile.TemporaryDirectory(prefix="forked-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        child = start(args, cwd=cwd, env=env, stdout=out,
                      stderr=subprocess.STDOUT if merge else err)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        with open(out, errors="replace") as f:
            stdout = f.read()
        stderr = None
        if not merge:
            with open(err, errors="replace") as f:
                stderr = f.read()
    return subprocess.CompletedProcess([sys.executable, *args], child.returncode, stdout, stderr)


# -- the zygote -------------------------------------------------------------------------


def _die_with_parent():
    """SIGKILL when the parent exits (Linux), so nothing outlives the tests."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


def _serve():
    import importlib

    _die_with_parent()
    # the protocol on fds of its own; stdin from /dev/null, stdout to stderr
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.path.pop(0)  # this file's folder; each child puts its own first
    for name in PRELOAD:
        importlib.import_module(name)
    import threading

    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as f:
            names.append(f.read().strip())
    if threading.active_count() > 1 or any(n.startswith("tf_") for n in names):
        raise SystemExit(f"zygote: threads {names} after the imports: forking is not safe")
    os.write(replies, b'{"ready": true}\n')
    lines = _Lines(requests)
    while True:
        try:
            request = lines.read()
        except EOFError:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(requests)
            os.close(replies)
            _child(request)  # never returns
        os.write(replies, json.dumps({"pid": pid}).encode() + b"\n")
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        code = -info.si_status if killed else info.si_status
        os.write(replies, json.dumps({"returncode": code}).encode() + b"\n")
        try:
            assert lines.read() == "reap"
        finally:
            os.waitpid(pid, 0)


def _redirect(target, fd, flags):
    if target == "STDOUT":
        os.dup2(1, fd)
        return
    opened = os.open(target or os.devnull, flags, 0o666)
    os.dup2(opened, fd)
    os.close(opened)


def _child(request):
    code = 1
    try:
        _die_with_parent()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        writing = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        _redirect(request["stdout"], 1, writing)
        _redirect(request["stderr"], 2, writing)
        code = _main(request["args"])
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _main(args):
    """``python *args`` after the imports: the exit status."""
    import atexit
    import runpy
    import signal
    import threading
    import traceback

    code = 0
    sys.orig_argv = [sys.executable, *args]
    try:
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            sys.path.insert(0, "")
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__",
                                                       "__builtins__": __builtins__})
        elif args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path.insert(0, os.getcwd())
            quiet = sys.modules.get("keras_caffe._cli_quiet")
            if quiet is not None:  # what importing keras_caffe does in a command line
                quiet.quiet_cli_start()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exit:
        if exit.code is None:
            code = 0
        elif isinstance(exit.code, int):
            code = exit.code
        else:
            print(exit.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # the interpreter's exit: non-daemon threads, then atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code == -signal.SIGINT:  # as CPython: death by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


if __name__ == "__main__":
    _serve()
