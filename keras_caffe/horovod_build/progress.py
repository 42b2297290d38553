"""The Horovod build's progress, read from what ``pip wheel -v`` prints.

``pip wheel -v`` passes on the output of Horovod's setup.py, which runs
CMake (configure, then ``cmake --build``: make with CMake's Makefiles), so
the build prints, indented by pip::

      -- Build files have been written to: <build tree>
      [  7%] Building CXX object horovod/common/CMakeFiles/...cc.o
      [ 51%] Linking CXX static library libgloo.a
      ...

``BuildProgress.feed`` reads those lines: each ``Building <lang> object``
line is one more file (printed as its compile starts); the total is the
number of such steps in the build tree CMake wrote
(``count_compile_steps``: its ``build.make`` files).
The status (``status()``) says which stage the build is in, the file being
compiled of the total and the time since the build started::

    building Horovod: compiling file 35/101, 1 min 12 s

On a terminal it is one line, rewritten as it changes and every second
(``ticking`` calls ``tick``). Elsewhere (a CI log, a pipe) it is written as
plain lines: when a stage starts, at every 10% of the files, and after
``QUIET_SECONDS`` without a line, so the build is never silent for longer.
"""

import contextlib
import re
import sys
import threading
import time
from pathlib import Path

from keras_caffe.horovod_build.cache import elapsed

#: The longest a non-terminal output stays without a progress line (seconds).
QUIET_SECONDS = 30
#: A plain line at every STEP percent of the files compiled.
STEP = 10
#: How often ``ticking`` calls ``tick`` (seconds).
TICK_SECONDS = 1.0

COMPILE = re.compile(r"^\s*\[\s*(\d+)%\] Building \w+ object ")
PERCENT = re.compile(r"^\s*\[\s*(\d+)%\] ")
BUILD_TREE = re.compile(r"^\s*-- Build files have been written to: (.+?)\s*$")
#: A compile step in CMake's Makefiles (``<target>.dir/build.make``).
COMPILE_RULE = re.compile(r'"Building \w+ object ')

#: (a line's pattern, the stage it starts), first match first; lines that
#: match none leave the stage as it is.
STAGES = (
    (COMPILE, "compiling"),
    (re.compile(r"^\s*\[\s*\d+%\] Linking "), "linking"),
    (re.compile(r"^\s*-- "), "configuring"),
    (re.compile(r"^\s*(?:running install\b|installing to |creating '?\S*\.whl|"
                r"adding '[^']*\.dist-info/)"), "wheel"),
)
#: What the status says of each stage (``files``: ``35/101``, or ``35``
#: before the total is known). CMake prints ``Building ... object`` as a
#: file's compile starts: ``compiling file 35/101`` is the 35th started.
WORDS = {
    "preparing": "pip is preparing the build",
    "configuring": "CMake is configuring",
    "compiling": "compiling file {files}",
    "linking": "linking, file {files} started",
    "wheel": "{files} files compiled, making the wheel",
}
#: The stages announced by a plain line when they start (not ``linking``,
#: which alternates with ``compiling`` as each library is done).
ANNOUNCED = ("configuring", "compiling", "wheel")


def count_compile_steps(tree):
    """The files the build tree ``tree`` compiles: the ``Building <lang>
    object`` steps of its ``build.make`` files; None when it has none."""
    total = 0
    for path in Path(tree).rglob("build.make"):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        total += len(COMPILE_RULE.findall(text))
    return total or None


class BuildProgress:
    """The progress of one build, written to ``stream`` (default: stdout).

    ``tty``: rewrite one line (default: whether ``stream`` is a terminal);
    ``clock``: seconds, monotonic (the tests pass a fake one). Safe to call
    from the thread reading the output and the ``ticking`` thread at once.
    """

    def __init__(self, stream=None, tty=None, clock=time.monotonic):
        self.stream = sys.stdout if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.start = clock()
        self.stage = "preparing"
        self.compiled = 0  # the files whose compile started
        self.total = None
        self.percent = None  # CMake's, of the last [ NN%] line
        self._lock = threading.Lock()
        self._announced = set()
        self._step = 0  # the last STEP multiple a plain line was written for
        self._last_line = self.start  # when a plain line was last written
        self._shown = ""  # the terminal line as last drawn

    def files(self):
        """``35/101`` (``35`` before the total is known)."""
        return f"{self.compiled}/{self.total}" if self.total else str(self.compiled)

    def status(self):
        """``building Horovod: compiling file 35/101, 1 min 12 s``."""
        words = WORDS[self.stage].format(files=self.files())
        return f"building Horovod: {words}, {elapsed(self.clock() - self.start)}"

    def fraction(self):
        """The part of the files compiled (of CMake's percentage before the
        total is known)."""
        if self.total:
            return min(self.compiled / self.total, 1.0)
        return (self.percent or 0) / 100

    def feed(self, line):
        """One line of the build's output."""
        with self._lock:
            self._read(line)
            if self.tty:
                self._draw()
                return
            if self.stage in ANNOUNCED and self.stage not in self._announced:
                self._announced.add(self.stage)
                self._step = max(self._step, self._steps())
                self._write_line()
            elif self.stage == "compiling" and self._steps() > self._step:
                self._step = self._steps()
                self._write_line()

    def tick(self):
        """Time passed: redraw the terminal line (its seconds), or write a
        plain line when none was written for ``QUIET_SECONDS``."""
        with self._lock:
            if self.tty:
                self._draw()
            elif self.clock() - self._last_line >= QUIET_SECONDS:
                self._write_line()

    def finish(self):
        """End the terminal line, so that what follows starts on its own."""
        with self._lock:
            if self.tty and self._shown:
                self._draw()
                self.stream.write("\n")
                self.stream.flush()
                self._shown = ""

    def _read(self, line):
        percent = PERCENT.match(line)
        if percent:
            self.percent = int(percent.group(1))
        tree = BUILD_TREE.match(line)
        if tree:
            self.total = count_compile_steps(tree.group(1))
        self.stage = next((stage for pattern, stage in STAGES if pattern.match(line)),
                          self.stage)
        self.compiled += bool(COMPILE.match(line))

    def _steps(self):
        return int(self.fraction() * 100) // STEP * STEP

    def _write_line(self):
        self.stream.write(self.status() + "\n")
        self.stream.flush()
        self._last_line = self.clock()

    def _draw(self):
        text = self.status()
        if text != self._shown:
            padding = " " * max(0, len(self._shown) - len(text))
            self.stream.write(f"\r{text}{padding}")
            self.stream.flush()
            self._shown = text


@contextlib.contextmanager
def ticking(progress, seconds=TICK_SECONDS):
    """``progress.tick()`` every ``seconds`` in a thread while the block
    runs, then ``progress.finish()``."""
    stop = threading.Event()

    def run():
        while not stop.wait(seconds):
            progress.tick()

    thread = threading.Thread(target=run, name="horovod-build-progress", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()
        progress.finish()
