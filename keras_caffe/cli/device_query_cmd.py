"""``keras-caffe device_query``: the devices TensorFlow sees, as ``caffe device_query``.

Caffe's ``device_query -gpu N`` prints the CUDA properties of GPU N. Here:
TensorFlow's build (CUDA or not), every device it found, each GPU's name,
compute capability and memory (total from ``nvidia-smi`` where it is
installed, in use from TensorFlow), and the CPU: its model, the vector
instructions it has (AVX2, AVX-512, ...), and whether TensorFlow's oneDNN
kernels are on.
"""

from keras_caffe.cli._registry import command, usage

#: The CPU flags worth showing for TensorFlow's kernels.
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "neon", "asimd")


def _arguments(parser):
    parser.add_argument("--gpu", "-gpu", help="only this GPU (an id, as Caffe's -gpu)")
    parser.add_argument("--json", action="store_true", help="print JSON instead")


@command("device_query", help="list TensorFlow's devices: GPUs and the CPU (like `caffe "
                              "device_query`)",
         description="TensorFlow's build and devices: each GPU's name, compute capability and "
                     "memory, and the CPU's model, vector instructions and oneDNN.",
         arguments=_arguments, tensorflow_only=True)
def run(args):
    import json

    info = device_info(args.gpu)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key in ("tensorflow", "cuda_build", "cuda", "cudnn"):
        print(f"{key}: {info[key]}")
    print(f"devices: {', '.join(info['devices']) or 'none'}")
    for gpu in info["gpus"]:
        print(f"GPU {gpu['id']}:")
        for key, value in gpu.items():
            if key != "id":
                print(f"  {key}: {value}")
    if not info["gpus"]:
        print("GPUs: none")
    print("CPU:")
    for key, value in info["cpu"].items():
        print(f"  {key}: {', '.join(value) if isinstance(value, list) else value}")
    return 0


def device_info(gpu=None):
    """A dict of TensorFlow's build, devices, GPUs and CPU (see the module docstring)."""
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    gpus = tf.config.list_physical_devices("GPU")
    ids = list(range(len(gpus)))
    if gpu is not None:
        if not gpu.isdigit() or int(gpu) not in ids:
            raise usage(f"--gpu {gpu}: no such GPU; GPUs found: "
                        f"{', '.join(map(str, ids)) or 'none'}")
        ids = [int(gpu)]
    totals = _nvidia_smi_totals()
    return {
        "tensorflow": tf.__version__,
        "cuda_build": bool(build.get("is_cuda_build", False)),
        "cuda": build.get("cuda_version", "none"),
        "cudnn": build.get("cudnn_version", "none"),
        "devices": [d.name.replace("/physical_device:", "")
                    for d in tf.config.list_physical_devices()],
        "gpus": [_gpu(tf, i, gpus[i], totals) for i in ids],
        "cpu": _cpu(),
    }


def _gpu(tf, index, device, totals):
    details = tf.config.experimental.get_device_details(device)
    capability = details.get("compute_capability")
    entry = {"id": index, "name": details.get("device_name", "unknown"),
             "compute_capability": ".".join(map(str, capability)) if capability else "unknown",
             "total_memory": totals[index] if index < len(totals) else "unknown (no nvidia-smi)"}
    try:
        used = tf.config.experimental.get_memory_info(f"GPU:{index}")["current"]
        entry["memory_in_use_by_tensorflow"] = f"{used / 2**20:.0f} MiB"
    except (ValueError, RuntimeError):
        pass
    return entry


def _nvidia_smi_totals():
    """Each GPU's total memory from ``nvidia-smi`` (empty without it)."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _cpu():
    import os
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "cpu model") and value.strip():
                    model = value.strip()
                elif key in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:
        pass
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if onednn is None:
        onednn_text = ("on (TensorFlow's default on x86-64; TF_ENABLE_ONEDNN_OPTS=0 turns "
                       "it off)" if platform.machine() in ("x86_64", "AMD64") else
                       "off (TensorFlow's default off x86-64)")
    else:
        onednn_text = f"{'off' if onednn == '0' else 'on'} (TF_ENABLE_ONEDNN_OPTS={onednn})"
    return {"model": model, "logical_cpus": os.cpu_count(), "machine": platform.machine(),
            "instructions": [f for f in CPU_FLAGS if f in flags], "onednn": onednn_text}
