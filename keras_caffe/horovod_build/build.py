"""The build: plan it (``make_plan``, all that ``--dry-run`` prints), then run
it (``run_plan``): sdist -> verified -> unpacked into a fresh temporary
directory -> patched -> ``pip install --no-deps --no-build-isolation
--no-cache-dir`` into this interpreter -> ``horovod.tensorflow`` imported in a
fresh process, which must report Gloo (and NCCL when planned).

``--no-deps`` and ``--no-build-isolation``: pip never installs, upgrades or
replaces the user's TensorFlow, and Horovod compiles against it.
``--no-cache-dir``: no wheel built against another TensorFlow is reused.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from keras_caffe.errors import HorovodBuildError
from keras_caffe.horovod_build import patches, sdist, target, toolchain

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


def _variables(info, gpu, jobs, environ):
    variables = dict(FIXED, MAKEFLAGS=f"-j{jobs}")
    cxxflags = _cxxflags(info, environ)
    if cxxflags:
        variables["CXXFLAGS"] = cxxflags
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
    return Plan(info, tools, choice, _variables(info, choice, jobs, environ), unset, jobs,
                sdist_path and str(sdist_path), [warning] if warning else [])


def describe(plan):
    """The plan as the lines ``--dry-run`` prints."""
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
    lines += [f"then: {' '.join(pip_install_command('<patched source>'))}",
              f"then: {sys.executable} -c \"{CHECK}\""]
    return plan.warnings + lines


def pip_install_command(source):
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
            "--no-cache-dir", str(source)]


def _run_logged(command, log, env=None, cwd=None, verbose=False):
    """Run ``command`` appending its output to ``log`` (and the terminal when
    ``verbose``); its exit status."""
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        if verbose:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env=env, cwd=cwd)
            for line in process.stdout:
                out.write(line)
                sys.stdout.write(line)
            return process.wait()
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                              cwd=cwd).returncode


def _tail(log, count=25):
    lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-count:])


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


def run_plan(plan, keep=False, verbose=False, say=print):
    """Build and install Horovod as ``plan`` says; the patch names applied.

    Works in a fresh temporary directory, removed on success and kept (its
    ``build.log`` named in the error) on failure or with ``keep``.
    """
    work = Path(tempfile.mkdtemp(prefix="keras-caffe-horovod-"))
    log = work / "build.log"
    env = plan.environment()
    try:
        archive = sdist.verify(plan.sdist) if plan.sdist else sdist.download(work)
        say(f"sdist {archive}: sha256 verified")
        source = sdist.unpack(archive, work / "src")
        applied = patches.apply_patches(source)
        say(f"patches applied: {', '.join(applied)}")
        _install(RUNTIME_REQUIREMENTS, log, verbose)
        say(f"building Horovod {sdist.VERSION} against TensorFlow {plan.tensorflow.version} "
            f"with {plan.jobs} jobs (log: {log})")
        if _run_logged(pip_install_command(source), log, env=env, cwd=work, verbose=verbose):
            print(_tail(log), file=sys.stderr)
            raise HorovodBuildError(f"the Horovod build failed (its end above); the log: {log}")
        built = _verify(plan, env)
        say(f"horovod.tensorflow imports: gloo_built={built['gloo']} nccl_built={built['nccl']}")
    except BaseException:
        keep = True
        raise
    finally:
        if keep:
            say(f"build directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return applied


def _install(requirements, log, verbose):
    command = [sys.executable, "-m", "pip", "install", *requirements]
    if _run_logged(command, log, verbose=verbose):
        raise HorovodBuildError(f"pip install {' '.join(requirements)} failed; its log: {log}")
