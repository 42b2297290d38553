"""The build: plan it (``make_plan``, all that ``--dry-run`` prints), then run
it (``run_plan``): a cached build whose key matches the plan's
(``cache.py``), installed and checked; else sdist -> verified -> unpacked
into a fresh temporary directory -> patched -> ``pip wheel --no-deps
--no-build-isolation --no-cache-dir --verbose`` (its output in the log, its
progress shown: ``progress.py``) -> that wheel ``pip install``-ed into
this interpreter -> ``horovod.tensorflow`` imported in a fresh process, which
must report Gloo (and NCCL when planned) -> the wheel kept in the cache.

``--no-deps`` and ``--no-build-isolation``: pip never installs, upgrades or
replaces the user's TensorFlow, and Horovod compiles against it.
``--no-cache-dir``: pip's own cache, whose key knows nothing of TensorFlow,
is never used; keras-caffe's cache is keyed on all that shapes the binary.
``CXX`` is set to the compiler the tool check found, so the build compiles
with the compiler the key names (CMake would otherwise pick ``c++``).
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from keras_caffe.errors import HorovodBuildError
from keras_caffe.horovod_build import cache, patches, progress, sdist, target, toolchain

#: The build's fixed variables: TensorFlow and Gloo, nothing else.
FIXED = {"HOROVOD_WITH_TENSORFLOW": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
         "HOROVOD_WITHOUT_PYTORCH": "1", "HOROVOD_WITHOUT_MXNET": "1"}
#: Horovod's runtime requirements (setup.py's install_requires), none of
#: which depends on TensorFlow; installed first because the build runs
#: without pip's dependency resolution.
RUNTIME_REQUIREMENTS = ("cloudpickle", "psutil", "pyyaml", "packaging")
#: TensorFlow's own copies of the headers its XLA headers include (relative
#: to tf.sysconfig.get_include()), so no libhighwayhash-dev/libfarmhash-dev.
BUNDLED_INCLUDES = ("external/highwayhash", "external/farmhash_archive/src")
CHECK = ("import horovod.tensorflow as hvd; "
         "print('gloo', bool(hvd.gloo_built()), 'nccl', bool(hvd.nccl_built()))")


@dataclass
class Plan:
    tensorflow: target.TensorFlowInfo
    tools: toolchain.Toolchain
    gpu: target.GpuChoice
    variables: dict
    unset: list
    jobs: int
    sdist: str = None
    warnings: list = field(default_factory=list)
    #: the build cache's key and what it is the hash of (``cache.components``)
    key: str = None
    components: dict = None

    def environment(self, base=None):
        """The build's environment: ``base`` (os.environ) with ``unset``
        removed and ``variables`` set."""
        env = {k: v for k, v in (os.environ if base is None else base).items()
               if k not in self.unset}
        env.update(self.variables)
        return env


def default_jobs():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cxxflags(info, environ):
    flags = [environ.get("CXXFLAGS", "")]
    for relative in BUNDLED_INCLUDES:
        directory = Path(info.include) / relative
        if directory.is_dir():
            flags.append(f"-I{directory}")
    return " ".join(flag for flag in flags if flag)


def _variables(info, tools, gpu, jobs, environ):
    variables = dict(FIXED, MAKEFLAGS=f"-j{jobs}")
    cxxflags = _cxxflags(info, environ)
    if cxxflags:
        variables["CXXFLAGS"] = cxxflags
    variables["CXX"] = tools.compiler
    if gpu.nccl:
        variables.update(HOROVOD_GPU_OPERATIONS="NCCL", HOROVOD_CUDA_HOME=gpu.cuda_home)
    return variables


def make_plan(sdist_path=None, gpu="auto", jobs=None, allow_untested=False, environ=None):
    """Check the tools and the TensorFlow, decide NCCL or Gloo only; nothing
    is downloaded or built. ``HorovodBuildError`` when something is missing."""
    environ = os.environ if environ is None else environ
    if jobs is not None and jobs < 1:
        raise HorovodBuildError(f"--jobs {jobs}: expected a positive number")
    tools = toolchain.check(environ)
    info = target.probe_tensorflow(environ=environ)
    warning = target.check_supported(info, allow_untested)
    choice = target.choose_gpu(info, gpu, environ)
    jobs = jobs or default_jobs()
    unset = [] if choice.nccl else [k for k in target.GPU_VARIABLES if k in environ]
    plan = Plan(info, tools, choice, _variables(info, tools, choice, jobs, environ), unset, jobs,
                sdist_path and str(sdist_path), [warning] if warning else [])
    plan.components = cache.components(plan, environ)
    plan.key = cache.key_of(plan.components)
    return plan


def describe(plan, build_cache=None, use_cache=True):
    """The plan as the lines ``--dry-run`` prints; with ``build_cache``, the
    entry it would use or store and the key's components."""
    tools = plan.tools
    lines = [f"TensorFlow {plan.tensorflow.version} ({sys.executable}; headers "
             f"{plan.tensorflow.include})",
             f"tools: cmake {'.'.join(map(str, tools.cmake_version))} ({tools.cmake}), "
             f"compiler {tools.compiler}, Python.h in {tools.python_include}",
             f"GPU: {plan.gpu.reason}",
             f"sdist: {plan.sdist or 'pip download horovod==' + sdist.VERSION} "
             f"(sha256 {sdist.SHA256})",
             "patches:"]
    lines += [f"  {patch.name}{' (GPU builds)' if patch.gpu_only else ''}: {patch.why}"
              for patch in patches.PATCHES]
    lines += ["environment:"] + [f"  {k}={v}" for k, v in plan.variables.items()]
    lines += [f"  unset {k}" for k in plan.unset]
    lines += [f"then: {' '.join(pip_wheel_command('<patched source>', '<wheel dir>'))}",
              f"then: {' '.join(pip_install_wheel_command('<the wheel>'))}",
              f"then: {sys.executable} -c \"{CHECK}\""]
    if build_cache is not None:
        entry, _ = build_cache.lookup(plan.key)
        where = build_cache.root / plan.key
        if entry is not None and use_cache:
            lines.append(f"cache: {where}: a cached build ({entry.summary()}), installed "
                         "and checked instead of building (--no-cache builds)")
        elif entry is not None:
            lines.append(f"cache: {where}: --no-cache: built anyway, then it replaces the "
                         "cached build there")
        else:
            lines.append(f"cache: {where}: none yet; the verified build is kept there")
        lines.append(f"cache key {plan.key}: the sha256 of")
        lines += [f"  {name}: {value}" for name, value in plan.components.items()]
    return plan.warnings + lines


def pip_wheel_command(source, wheel_dir):
    """Build the wheel; ``--verbose``: pip passes on the build's output (CMake's,
    the compiler's), which goes to the log and the progress line, and
    which pip would otherwise hide."""
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "--no-cache-dir", "--verbose", "--wheel-dir", str(wheel_dir), str(source)]


def pip_install_wheel_command(wheel):
    """Install a built or cached wheel: no dependency, no index, and over
    whatever Horovod is installed (the same version built for another
    TensorFlow)."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
            "--force-reinstall", str(wheel)]


def _run_logged(command, log, env=None, cwd=None, verbose=False, meter=None):
    """Run ``command`` appending its output to ``log`` (and the terminal when
    ``verbose``; each line to ``meter.feed``, a ``progress.BuildProgress``,
    which ticks meanwhile); its exit status."""
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        if not verbose and meter is None:
            return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  cwd=cwd).returncode
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", env=env, cwd=cwd)
        with progress.ticking(meter) if meter is not None else contextlib.nullcontext():
            for line in process.stdout:
                out.write(line)
                if verbose:
                    sys.stdout.write(line)
                if meter is not None:
                    meter.feed(line)
        return process.wait()


def _tail(log, count=25):
    """What a failure shows of the log: its last ``count`` lines, or, when
    the last command's output ends in a Python traceback (Horovod's setup.py
    raising for a failed ``cmake --build``, pip's summary after it), the
    ``count`` lines before that traceback (the compiler's and make's errors)
    and the exception's line."""
    lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    command = max((i for i, line in enumerate(lines) if line.startswith("$ ")), default=0)
    starts = [i for i in range(command, len(lines))
              if lines[i].strip() == "Traceback (most recent call last):"]
    if not starts:
        return "\n".join(lines[-count:])
    start = starts[-1]
    indent = len(lines[start]) - len(lines[start].lstrip())
    raised = next((line for line in lines[start + 1:]
                   if line.strip() and len(line) - len(line.lstrip()) <= indent), "")
    return "\n".join([*lines[max(command, start - count):start],
                      "  [the traceback is left out here: it is in the log]", raised])


def _verify(plan, env):
    result = subprocess.run([sys.executable, "-c", CHECK], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tempfile.gettempdir())
    words = result.stdout.split()
    built = dict(zip(words[-4::2], words[-3::2])) if result.returncode == 0 else {}
    if built.get("gloo") != "True":
        raise HorovodBuildError(
            f"Horovod installed but `import horovod.tensorflow` fails or reports no Gloo: "
            f"{(result.stdout.strip().splitlines() or ['no output'])[-1]}")
    if plan.gpu.nccl and built.get("nccl") != "True":
        raise HorovodBuildError("Horovod installed but hvd.nccl_built() is False")
    return built


def run_plan(plan, keep=False, verbose=False, say=print, build_cache=None, use_cache=True):
    """Install Horovod as ``plan`` says; ``"cache"`` or ``"source"``, which
    way it was installed.

    With ``build_cache`` (and ``use_cache``), its entry for ``plan.key`` is
    installed and checked as a fresh build is; an entry that fails is
    removed. Otherwise (or then) Horovod is built from source and, once
    checked, its wheel is stored in ``build_cache``. One line says which.
    Works in a fresh temporary directory, removed on success and kept (its
    ``build.log`` named in the error) on failure or with ``keep``.
    """
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="keras-caffe-horovod-"))
    log = work / "build.log"
    env = plan.environment()
    try:
        if build_cache is not None and not use_cache:
            say(f"Horovod {sdist.VERSION}: --no-cache: building from source (then cached as "
                f"{plan.key})")
        elif build_cache is not None and _from_cache(plan, build_cache, env, log, verbose,
                                                     say, start):
            return "cache"
        _build(plan, work, log, env, verbose, say)
        seconds = time.monotonic() - start
        if build_cache is None:
            say(f"Horovod {sdist.VERSION}: built from source in {cache.elapsed(seconds)}")
            return "source"
        try:
            entry = build_cache.store(plan.key, plan.components, _wheel(work / "wheel"),
                                      seconds, replace=not use_cache)
        except OSError as err:
            say(f"Horovod {sdist.VERSION}: built from source in {cache.elapsed(seconds)}; "
                f"warning: not cached ({err})")
        else:
            say(f"Horovod {sdist.VERSION}: built from source in {cache.elapsed(seconds)}; "
                f"cached as {entry.key} in {build_cache.root}")
        return "source"
    except BaseException:
        keep = True
        raise
    finally:
        if keep:
            say(f"build directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _from_cache(plan, build_cache, env, log, verbose, say, start):
    """Install and check ``plan.key``'s cached build; False (said why) when
    there is none or it fails, which removes it."""
    version = sdist.VERSION
    entry, problem = build_cache.lookup(plan.key)
    if entry is None:
        if problem:
            build_cache.remove(plan.key)
            say(f"Horovod {version}: cached build {plan.key} is incomplete ({problem}): "
                "removed; building from source")
        else:
            say(f"Horovod {version}: {build_cache.why_missing(plan.components)}: "
                "building from source")
        return False
    _install(RUNTIME_REQUIREMENTS, log, verbose)
    try:
        if _run_logged(pip_install_wheel_command(entry.wheel), log, env=env, verbose=verbose):
            raise HorovodBuildError(f"pip install {entry.wheel.name} failed (log: {log})")
        _verify(plan, env)
    except HorovodBuildError as err:
        build_cache.remove(plan.key)
        say(f"Horovod {version}: cached build {plan.key} ({entry.summary()}) failed its "
            f"check ({err}): removed; building from source")
        return False
    say(f"Horovod {version}: cached build {plan.key} ({entry.summary()}) installed in "
        f"{cache.elapsed(time.monotonic() - start)}")
    return True


def _build(plan, work, log, env, verbose, say):
    """Build the wheel from source in ``work``, install it, check it."""
    archive = sdist.verify(plan.sdist) if plan.sdist else sdist.download(work)
    say(f"sdist {archive}: sha256 verified")
    source = sdist.unpack(archive, work / "src")
    applied = patches.apply_patches(source)
    say(f"patches applied: {', '.join(applied)}")
    _install(RUNTIME_REQUIREMENTS, log, verbose)
    say(f"building Horovod {sdist.VERSION} against TensorFlow {plan.tensorflow.version} "
        f"with {plan.jobs} jobs (log: {log})")
    meter = None if verbose else progress.BuildProgress()  # --verbose shows the output itself
    # pip's and setup.py's lines as they are written, not in blocks (no binary changes)
    unbuffered = dict(env, PYTHONUNBUFFERED="1")
    if _run_logged(pip_wheel_command(source, work / "wheel"), log, env=unbuffered, cwd=work,
                   verbose=verbose, meter=meter):
        print(_tail(log), file=sys.stderr)
        raise HorovodBuildError(f"the Horovod build failed (its end above); the log: {log}")
    wheel = _wheel(work / "wheel")
    if _run_logged(pip_install_wheel_command(wheel), log, env=env, cwd=work, verbose=verbose):
        print(_tail(log), file=sys.stderr)
        raise HorovodBuildError(f"pip install {wheel.name} failed (its end above); the log: {log}")
    built = _verify(plan, env)
    say(f"horovod.tensorflow imports: gloo_built={built['gloo']} nccl_built={built['nccl']}")


def _wheel(directory):
    wheels = sorted(Path(directory).glob("horovod-*.whl"))
    if len(wheels) != 1:
        raise HorovodBuildError(f"pip wheel left {len(wheels)} Horovod wheels in {directory}, "
                                "expected one")
    return wheels[0]


def _install(requirements, log, verbose):
    command = [sys.executable, "-m", "pip", "install", *requirements]
    if _run_logged(command, log, verbose=verbose):
        raise HorovodBuildError(f"pip install {' '.join(requirements)} failed; its log: {log}")
