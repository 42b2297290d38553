"""``keras-caffe install-horovod``: Horovod 0.28.1 built against the
TensorFlow installed here (2.16 to 2.21), with Gloo.

Horovod's last release (0.28.1, 2023) no longer compiles against
TensorFlow >= 2.19 as published. This builds it from PyPI's sdist with
keras-caffe's patch set (``patches.PATCHES``, each edit applied exactly once
or a clear error), into the running interpreter, never touching TensorFlow:

1. ``toolchain.check``: cmake (3.13 to 3.x, or 4 with
   ``CMAKE_POLICY_VERSION_MINIMUM``), make, g++, Python.h.
2. ``target.probe_tensorflow`` / ``check_supported`` / ``choose_gpu``:
   TensorFlow's version and headers, in 2.16..2.21; NCCL or Gloo only.
3. ``sdist.download`` (``pip download --no-binary :all:``) or ``--sdist``,
   then ``sdist.verify`` against the pinned sha256, ``sdist.unpack``.
4. ``patches.apply_patches``, then ``pip wheel --no-deps
   --no-build-isolation --no-cache-dir --verbose`` (its output to
   ``build.log`` and, read by ``progress.BuildProgress``, to a progress
   line) and ``pip install`` of the wheel, with ``HOROVOD_WITH_TENSORFLOW=1
   HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1
   HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-jN`` (``HOROVOD_GPU_OPERATIONS=NCCL``
   when ``choose_gpu`` says so).
5. ``import horovod.tensorflow as hvd; hvd.gloo_built()`` in a fresh process.
6. ``cache.BuildCache.store``: the checked wheel kept under
   ``~/.cache/keras-caffe/horovod/<key>/`` (``--cache-dir``,
   ``$KERAS_CAFFE_CACHE``), the key a hash of all that shapes the binary
   (``cache.components``). The next run with the same key installs that wheel
   and runs step 5 instead of steps 3-4; ``--no-cache`` builds anyway.

Reference: https://horovod.readthedocs.io/en/stable/install_include.html;
docs/horovod.md says what each patch does and what is tested.
"""

from keras_caffe.horovod_build.build import describe, make_plan, run_plan
from keras_caffe.horovod_build.cache import BuildCache
from keras_caffe.horovod_build.patches import PATCHES, apply_patches
from keras_caffe.horovod_build.sdist import SHA256, VERSION

__all__ = ["PATCHES", "SHA256", "VERSION", "BuildCache", "apply_patches", "describe",
           "make_plan", "run_plan", "main"]


def main(args, say=print):
    """The CLI command: ``args`` from ``keras-caffe install-horovod``'s parser."""
    plan = make_plan(args.sdist, gpu=args.gpu, jobs=args.jobs,
                     allow_untested=args.any_tensorflow)
    build_cache = BuildCache.at(getattr(args, "cache_dir", None))
    use_cache = not getattr(args, "no_cache", False)
    for line in describe(plan, build_cache, use_cache):
        say(line)
    if args.dry_run:
        return 0
    run_plan(plan, keep=args.keep_build_dir, verbose=args.verbose, say=say,
             build_cache=build_cache, use_cache=use_cache)
    say(f"Horovod {VERSION} installed; try: horovodrun -np 2 -H localhost:2 --gloo "
        "keras-caffe train --solver solver.prototxt")
    return 0
