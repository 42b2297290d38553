"""Which test files each tier leaves out or adds: the suite's tiers in one
place (conftest.py turns these tables into markers; tests/test_tiers.py
checks that every file named here exists, so a rename cannot drop a file
from a tier unseen).

- ``make test``: every test, with TensorFlow's default CPU kernels.
- ``make test-quick``: the edit loop, ``-m quick``: every file except those in
  NOT_QUICK (processes, horovodrun, whole-net training) and except tests
  marked ``slow``.
- ``make test-backends``: the files in BACKENDS, in .venv-jax and .venv-torch
  (no TensorFlow installed there) with ``KERAS_BACKEND`` set: conftest.py
  collects only those files on a backend other than TensorFlow, and leaves
  out their tests marked ``tensorflow_only``.
- ``make test-compat``: ``-m compat``, on the oldest TensorFlow setup.cfg
  allows (2.16: NumPy 1.x, protobuf 4.x) with the other CPU kernel family:
  what can differ between TensorFlow versions and kernel families. A test is
  ``compat`` when it is marked ``kernels`` (its numbers depend on oneDNN or
  Eigen: convolution family, LMS, golden parity; so every such test runs
  under both families in .ci/run) or its file is in COMPAT.

How COMPAT was chosen: by what the code under test touches that the
TensorFlow version or the NumPy/protobuf generation it comes with changes.
Not chosen: tests of argument checks, layer-type shape rules, CLI wording,
the analysis tables and Python-only logic, whose code paths are the same on
every TensorFlow; tests whose TensorFlow-facing part another compat test
already runs (test_optimizers: the golden solver replays; test_cli_export:
test_caffemodel_bytes and test_snapshot write the same files; test_cli_train:
test_solver and test_lms_solver run the loop); the wheel's contents
(test_packaging), which no TensorFlow changes; and the `slow` tests (their subject is an algorithm or a
process boundary, which one TensorFlow shows as well as another).
"""

#: Files whose code paths differ between TensorFlow versions (or the NumPy
#: and protobuf generations each one pins), with the reason.
COMPAT = {
    # protobuf 4.x against 5.x-7.x: text and binary parsing, the generated
    # caffe_pb2 module, the size checks before a parse.
    "tests/proto/test_proto.py": "protobuf runtime against the generated caffe_pb2",
    "tests/importers/formats/test_netfile.py": "protobuf text format, upgrade of V1 nets",
    "tests/importers/formats/test_hostile_files.py": "protobuf binary parse bounds",
    "tests/importers/net/test_caffemodel_bytes.py": "protobuf wire bytes, byte-for-byte export",
    "tests/optimizers/test_solver_files.py": "protobuf text format of solver files",
    "tests/importers/net/test_import_errors.py": "protobuf parse errors turned into ours",
    # NumPy 1.x against 2.x, h5py built for each: HDF5 files and snapshots.
    "tests/importers/snapshots/test_snapshot.py": "HDF5 and binaryproto snapshots (h5py, NumPy 1/2)",
    "tests/callbacks/test_snapshot_callback.py": "snapshot files written from Keras callbacks",
    "tests/training/test_solver_resume.py": "exact resume: tf.data position, RNG state, snapshot formats",
    # Keras/TensorFlow saving formats: .keras and .h5 round trips.
    "tests/test_public_api.py": "the public names and .keras files written and loaded",
    # tf.data: the data layers' pipelines (ops and their ordering per version).
    "tests/importers/data/test_pipelines.py": "tf.data engine of the data layers",
    "tests/importers/data/test_pipelines_errors.py": "errors raised from inside tf.data",
    "tests/importers/data/test_pipelines_sources.py": "tf.data sources: HDF5, LMDB, lists",
    "tests/importers/data/test_pipelines_images.py": "image decoding ops",
    "tests/importers/net/test_memory_budget_data.py": "tf.data options (AUTOTUNE ram_budget, map parallelization off)",
    "tests/importers/formats/test_wrong_kind_files.py": "protobuf text-format errors (protobuf 4 against 5-7)",
    "tests/importers/data/test_dense_image_data.py": "image decoding and resizing ops",
    "tests/importers/data/test_video_data.py": "tf.data over video frames",
    # The schedules traced into tf.function (the optimizers' TensorFlow-only
    # paths run in the golden solver tests, marked `kernels`).
    "tests/test_schedules.py": "schedules traced into tf.function",
    "tests/training/test_solver.py": "the training loop: tf.function step, tf.data input, logs",
    # Horovod: built against each TensorFlow by our own command.
    "tests/horovod_build/test_horovod_build.py": "the build plan against the venv's TensorFlow",
    "tests/distributed/test_collectives.py": "horovodrun -np 2 with the Horovod built here",
    "tests/distributed/test_distributed_unit.py": "Horovod ops wrapped for Keras 3 tensors",
    # Installing beside the user's TensorFlow distribution (tensorflow-cpu in
    # the compat venv, tensorflow in the other).
    "tests/test_install.py": "installing never replaces the user's TensorFlow",
    # The memory measurements read TensorFlow's allocator and the kernels'.
    "tests/importers/net/test_memory_budget.py": "memory probes of each TensorFlow",
}

#: Files ``make test-quick`` leaves out, with the reason: they start
#: processes (TensorFlow imports of several seconds each, horovodrun), train
#: whole nets or run public nets whole (``make test`` runs them).
NOT_QUICK = {
    "tests/distributed/test_collectives.py": "horovodrun",
    "tests/distributed/test_elastic.py": "horovodrun, elastic restarts",
    "tests/distributed/test_fit.py": "horovodrun",
    "tests/distributed/test_signals_distributed.py": "horovodrun and signals",
    "tests/distributed/test_solver_distributed.py": "horovodrun",
    "tests/benchmarks/test_benchmark_scripts.py": "runs benchmark scripts as processes",
    "tests/benchmarks/test_jax_data_parallel_benchmark.py": "benchmark workers, horovodrun",
    "tests/distributed/test_jax_data_parallel.py": "a JAX process per device count",
    "tests/distributed/test_jax_local_sums.py": "a JAX process per device count",
    "tests/distributed/test_jax_multiprocess.py": "two JAX processes, one killed",
    "tests/test_cpu_memory_pool.py": "processes under memory limits",
    "tests/examples/test_example_elastic.py": "runs an example under horovodrun",
    "tests/examples/test_example_horovod.py": "runs an example under horovodrun",
    "tests/examples/test_example_yellowfin.py": "runs an example: whole-net training",
    "tests/examples/test_examples.py": "runs the examples as processes",
    "tests/examples/test_example_any_backend.py": "runs an example as a process",
    "tests/training/test_finetune.py": "whole-net fine-tuning in processes",
    "tests/test_fuzz.py": "fuzzing in worker processes",
    "tests/test_install.py": "pip installs into new venvs",
    "tests/test_install_without_tensorflow.py": "pip installs into a new venv",
    "tests/lms/test_lms_ceiling.py": "processes under RLIMIT_DATA",
    "tests/test_packaging.py": "builds the wheel, new venvs",
    "tests/test_readme.py": "runs the README's commands",
    "tests/training/test_signals.py": "training runs interrupted by signals",
    "tests/importers/snapshots/test_snapshot_crashes.py": "processes killed at write points",
    "tests/cli/test_snapshot_crashes_cli.py": "processes killed at write points",
    "tests/training/test_solver_mirrored.py": "training with MirroredStrategy",
    "tests/training/test_solver_resume.py": "training, then resume in fresh processes",
    "tests/optimizers/test_mirrored.py": "training with MirroredStrategy",
    "tests/cli/test_cli_train.py": "whole-net training through keras-caffe train",
    "tests/optimizers/test_yellowfin_closed_loop.py": "smoke runs of the closed-loop claim (make verify-claims)",
    "tests/optimizers/test_yellowfin_no_tuning.py": "smoke trainings of the no-tuning claim (make verify-claims)",
    "tests/importers/net/test_memory_budget.py": "a process per net",
    "tests/importers/data/test_pipelines_leveldb.py": "a process holding the database lock",
    # Whole nets: training runs, replays, XLA compiles per case, public nets.
    "tests/optimizers/test_yellowfin.py": "fit runs and XLA compiles per case",
    "tests/optimizers/test_optimizers.py": "fit runs of every solver, XLA compiles per case",
    "tests/optimizers/test_golden_solvers.py": "the 15 recorded trainings replayed, with and without XLA",
    "tests/optimizers/test_caffe_solver_port.py": "Caffe's solver test: trainings per solver",
    "tests/training/test_solver.py": "the training loop on the golden nets",
    "tests/optimizers/test_frozen_params.py": "fine-tuning runs",
    "tests/lms/test_lms_numbers.py": "gradients of whole models with and without LMS",
    "tests/lms/test_lms_entry_points.py": "fit and Solver training with and without LMS",
    "tests/test_public_api.py": ".keras files saved and loaded in fresh interpreters",
    "tests/importers/net/test_public_nets.py": "public nets imported and run whole",
    "tests/importers/net/test_golden_forward.py": "public nets against Caffe's outputs",
    "tests/layers/test_eigen_backward.py": "gradients of convolution stacks on both kernel paths",
    "tests/layers/test_kernel_families.py": "training of every convolution configuration",
    "tests/importers/layer_types/test_yolo_detection.py": "a YOLO test net end to end",
    "tests/importers/layer_types/test_proposal.py": "the ZF Faster R-CNN test net end to end",
}

#: Files whose tests run on every Keras backend (TensorFlow, JAX, PyTorch):
#: the golden tests of the optimizers, the schedules, the importer's numbers
#: and the snapshot formats, and the core's own checks. On JAX and PyTorch
#: conftest.py collects these files only (the others need TensorFlow).
BACKENDS = {
    "tests/test_backends.py": "the backend check, TensorFlow-only features refused by name",
    "tests/optimizers/test_golden_solvers.py": "BVLC Caffe's recorded solver trajectories",
    "tests/optimizers/test_caffe_solver_port.py": "Caffe's own solver test, ported",
    "tests/optimizers/test_optimizers.py": "the solvers' arguments, saving, multipliers",
    "tests/optimizers/test_solver_files.py": "solver files to optimizers",
    "tests/test_schedules.py": "Caffe's lr policies against Caffe's formulas",
    "tests/benchmarks/test_backend_optimizers.py": "the solver benchmark's smoke run",
    "tests/benchmarks/test_jax_data_parallel_benchmark.py":
        "the DataParallel benchmark: its JAX processes' smoke run, its schedule and arithmetic",
    "tests/test_devices.py": "device and memory queries of each backend, unknown GPU memory",
    "tests/importers/net/test_flownet2.py": "a FlowNet 2.0 net of the fork's layers, forward",
    "tests/importers/net/test_backend_support.py":
        "import, export and analyze without TensorFlow; the tf.data data layers' stand-ins",
    "tests/cli/test_cli_backends.py":
        "the CLI's start-up, --version, import/export/analyze, TensorFlow-only commands refused",
    "tests/cli/test_cli.py": "the CLI's import, analyze and their errors",
    "tests/cli/test_cli_export.py": "the CLI's export: Caffe's bytes, refusals, file modes",
    "tests/analysis/test_analyze.py": "analyze's shapes, sizes and FLOPs",
    "tests/analysis/test_analyze_scaling.py": "analyze's data-parallel scaling tables",
    "tests/importers/net/test_registry.py": "every layer type's shape rule and Keras layers agree",
    "tests/importers/net/test_import_errors.py": "bad nets and weights named by the importer",
    "tests/importers/net/test_memory_budget.py": "the import-time memory budget",
    "tests/importers/net/test_caffemodel_bytes.py": "export and snapshots: Caffe's bytes",
    "tests/importers/net/test_coverage.py": "the layer types people's importers used",
    "tests/test_readme.py":
        "the README's and docs' Python blocks; those needing TensorFlow refused in one line",
    "tests/examples/test_example_any_backend.py":
        "the README's solver and import examples as a script, TensorFlow never imported",
    "tests/test_install_without_tensorflow.py":
        "keras-caffe[jax]/[torch] installed in a bare venv with no TensorFlow, the example run there",
    "tests/optimizers/test_yellowfin.py":
        "YellowFin against the float64 equations, NaN/inf skipping, fit, save/load, lr_mult",
    "tests/optimizers/test_yellowfin_closed_loop.py":
        "closed-loop YellowFin against its float64 equations, skipped steps, save/load",
    "tests/optimizers/test_yellowfin_logs.py": "YellowFin's tuned rate in Keras's logs",
    "tests/optimizers/test_yellowfin_repr.py": "YellowFin's repr, tuned values read from its state",
    "tests/optimizers/test_yellowfin_no_tuning.py":
        "the no-tuning experiment's pipeline at a tiny size, its rules (PyTorch: the LSTM task)",
    "tests/distributed/test_jax_data_parallel.py":
        "the solvers and YellowFin under DataParallel on N virtual devices against one; "
        "its snapshots resumed on N devices and on one",
    "tests/distributed/test_jax_local_sums.py":
        "iter_size summed per device, one all-reduce per update under DataParallel (JAX)",
    "tests/optimizers/test_frozen_params.py":
        "lr_mult 0 as Caffe's frozen parameter, against the float64 port of Caffe's update",
    "tests/importers/snapshots/test_snapshot.py":
        "BVLC Caffe's snapshots resumed, the three formats round-tripped and refused",
    "tests/importers/snapshots/test_snapshot_backends.py":
        "snapshots written on each backend restored here, Caffe's bytes written again",
    "tests/test_saved_models.py": ".keras files saved on each backend loaded and trained on",
    "tests/callbacks/test_snapshot_callback.py": "CaffeSnapshot in fit, restore_snapshot",
    "tests/callbacks/test_caffe_logger.py": "CaffeLogger's lines from fit",
    "tests/callbacks/test_callbacks_backends.py":
        "the callbacks without TensorFlow; Horovod's refused in one line",
    "tests/distributed/test_jax_multiprocess.py":
        "two JAX processes (jax.distributed, Gloo) training as one; rank 0's snapshots; a kill; "
        "keras_caffe.data_parallel's argument checks, and its refusal off JAX",
    # Layer types and the nets' numbers: every non-data layer type's tests.
    "tests/importers/net/test_golden_forward.py":
        "BVLC Caffe's recorded outputs of the golden nets, same tolerances",
    "tests/importers/net/test_public_nets.py":
        "public fork nets run whole against a float64 numpy run",
    "tests/test_initializers.py": "Caffe's fillers as Keras initializers",
    "tests/importers/layer_types/test_layer_type_backends.py":
        "each layer type's declared backends against this one: runs eagerly and compiled, or refused",
    "tests/importers/layer_types/test_accum.py":
        "Accum against FlowNet 2.0's loops, forward and backward",
    "tests/importers/layer_types/test_activations.py":
        "activations and elementwise layers, their gradients",
    "tests/importers/layer_types/test_bn.py": "the forks' BN, forward and backward",
    "tests/importers/layer_types/test_bvlc_batch_and_windows.py":
        "SPP, Im2col, BatchReindex, Filter",
    "tests/importers/layer_types/test_c3d.py": "C3D's 3-D convolution, deconvolution, pooling",
    "tests/importers/layer_types/test_continuation_indicator.py": "ContinuationIndicator",
    "tests/importers/layer_types/test_contrastive_siamese.py":
        "ContrastiveLoss, BVLC's siamese step",
    "tests/importers/layer_types/test_convolution_nd.py": "Convolution/Deconvolution over 3 axes",
    "tests/importers/layer_types/test_correlation.py":
        "FlowNet's Correlation, forward and backward",
    "tests/importers/layer_types/test_data_augmentation.py": "FlowNet's DataAugmentation layer",
    "tests/importers/layer_types/test_depthwise.py": "the depthwise forks' convolutions",
    "tests/importers/layer_types/test_detection_output.py": "SSD's DetectionOutput and its NMS",
    "tests/importers/layer_types/test_flow_warp.py": "FlowWarp, forward and backward",
    "tests/importers/layer_types/test_fork_layers.py": "SSD's Normalize and other fork layers",
    "tests/importers/layer_types/test_interp.py": "PSPNet's Interp, forward and backward",
    "tests/importers/layer_types/test_learned.py":
        "Deconvolution, Embed, InnerProduct, BatchNorm, Scale",
    "tests/importers/layer_types/test_losses.py":
        "loss and Accuracy layers as Keras losses/metrics",
    "tests/importers/layer_types/test_lstm_unit.py": "LSTMUnit",
    "tests/importers/layer_types/test_opencv_elementwise.py": "OpenCV's elementwise layer names",
    "tests/importers/layer_types/test_permute.py": "SSD's Permute",
    "tests/importers/layer_types/test_pooling_darknet.py":
        "Pooling under the YOLO fork's size rule",
    "tests/importers/layer_types/test_pooling_mask.py": "MAX pooling's argmax mask",
    "tests/importers/layer_types/test_prior_box.py": "SSD's PriorBox",
    "tests/importers/layer_types/test_proposal.py":
        "Faster R-CNN's proposals and NMS, the ZF test net",
    "tests/importers/layer_types/test_psroi_pooling.py":
        "R-FCN's PSROIPooling, forward and backward",
    "tests/importers/layer_types/test_python_layer.py": "the recognised Python layers",
    "tests/importers/layer_types/test_recurrent.py": "LSTM and RNN, forward and backward",
    "tests/importers/layer_types/test_reductions.py": "ArgMax, Reduction, MVN",
    "tests/importers/layer_types/test_region.py": "the YOLO ports' Region",
    "tests/importers/layer_types/test_relu6.py": "ReLU6 and Axpy",
    "tests/importers/layer_types/test_reorg.py": "the YOLO fork's Reorg",
    "tests/importers/layer_types/test_resample.py": "FlowNet's Resample",
    "tests/importers/layer_types/test_roi_align.py":
        "ROIAlign as ncnn computes it, forward and backward",
    "tests/importers/layer_types/test_roi_pooling.py": "Fast R-CNN's ROIPooling",
    "tests/importers/layer_types/test_shape.py": "shape and routing layers",
    "tests/importers/layer_types/test_swish_multinomial.py": "Swish, MultinomialLogisticLoss",
    "tests/importers/layer_types/test_upsample.py": "the forks' Upsample, forward and backward",
    "tests/importers/layer_types/test_vision.py": "Convolution, Pooling, LRN against Caffe's loops",
    "tests/importers/layer_types/test_yolo_detection.py":
        "the YOLO detection outputs and their NMS",
}
