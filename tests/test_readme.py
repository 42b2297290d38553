"""Every README snippet runs as written, so the README cannot drift.

- Each ```python block runs in its own subprocess (the installed package),
  from a temporary folder holding the files the README names:
  ``solver.prototxt`` and its ``train_net.prototxt`` with their HDF5 data
  (the golden ``sgd`` case), ``deploy.prototxt`` and ``net.caffemodel`` (the
  golden LeNet). A block that needs Horovod is skipped without it.
- Every ``keras-caffe <subcommand> --flag`` the README shows (in code blocks,
  and in inline code with a flag or alone) must be a subcommand and a flag of
  the installed CLI's parser (``keras-caffe <sub> --help``, run in this
  process by ``cli_runner.run_cli``).
"""

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from cli_runner import run_cli
from support import REPO

README = (REPO / "README.md").read_text()
#: Texts whose keras-caffe command lines are checked against the CLI.
DOCUMENTS = {"README.md": README,
             **{f"docs/{p.name}": p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}}
NEWLINE = "\n"
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks():
    """(first line number, code) of each ```python block."""
    return [(README.count("\n", 0, m.start()) + 2, m.group(2))
            for m in FENCE.finditer(README) if m.group(1) == "python"]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", COLUMNS="200")


@pytest.fixture
def readme_folder(golden, tmp_path):
    """The files the README's snippets name, in a fresh folder."""
    shutil.copytree(golden / "solvers" / "sgd", tmp_path, dirs_exist_ok=True)
    lenet = golden / "forward" / "lenet"
    shutil.copy(lenet / "deploy_used.prototxt", tmp_path / "deploy.prototxt")
    shutil.copy(lenet / "weights.caffemodel", tmp_path / "net.caffemodel")
    return tmp_path


def test_the_readme_has_python_blocks():
    assert len(python_blocks()) >= 8


@pytest.mark.parametrize("line, code", python_blocks(), ids=lambda v: f"line{v}"
                         if isinstance(v, int) else "")
def test_python_block_runs(line, code, readme_folder):
    if "keras_caffe.distributed" in code and importlib.util.find_spec("horovod") is None:
        pytest.skip("the block needs Horovod (keras-caffe install-horovod)")
    # a process: the block runs as written, as a user's script, in a new interpreter
    proc = subprocess.run([sys.executable, "-c", code], cwd=readme_folder, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"README.md:{line}:\n{code}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_the_use_block_prints_the_optimizer_as_the_readme_says(tmp_path):
    (code,) = [code for _, code in python_blocks() if "print(opt)" in code]
    comment = re.search(r"print\(opt\)\s+# (.*)", code)[1]
    assert comment.endswith(", ...)")
    # a process: the block's first part runs as written, in a new interpreter
    proc = subprocess.run([sys.executable, "-c", code.split("\nopt = keras_caffe.optimizer_from")[0]],
                          env=_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith(comment[:-len(", ...)")])


# -- the CLI lines ----------------------------------------------------------------------------

COMMAND = re.compile(r"\bkeras-caffe[ \t]+([a-z][a-z_-]*)([^\n`]*)")
#: Where a shell command ends: a pipe, a redirection, a comment, a sequence.
END = re.compile(r"\s(?:\||2>&1|#|;|&&|\(or\b)")


def cli_uses(text=README, name="README.md"):
    """{subcommand: {flag: "file:line"}} of every keras-caffe command shown:
    each line of a fenced block, and inline code that holds a flag or is
    just ``keras-caffe <word>`` (not prose such as an error message)."""
    spans = []
    for m in FENCE.finditer(text):
        offset = m.start(2)
        for chunk in m.group(2).splitlines(keepends=True):
            spans.append((offset, chunk))
            offset += len(chunk)
    outside = FENCE.sub(lambda m: " " * len(m.group(0)), text)
    for m in re.finditer(r"`([^`]+)`", outside):
        code = " ".join(m.group(1).split())
        if re.fullmatch(r"keras-caffe [a-z_-]+", code) or (
                "keras-caffe " in code and " --" in code):
            spans.append((m.start(1), code))
    uses = {}
    for offset, span in spans:
        line = f"{name}:{text.count(NEWLINE, 0, offset) + 1}"
        for m in COMMAND.finditer(span):
            rest = END.split(m.group(2), maxsplit=1)[0]
            flags = uses.setdefault(m.group(1), {})
            for token in rest.split():
                token = token.strip("[]()")
                if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", token):
                    flags.setdefault(token.split("=")[0], line)
    return uses


@functools.lru_cache(maxsize=None)
def cli_help(*args):
    proc = run_cli(*args, "--help", env={"TF_CPP_MIN_LOG_LEVEL": "3"}, columns=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_readme_shows_cli_commands():
    uses = cli_uses()
    assert {"train", "import", "analyze", "time", "install-horovod"} <= set(uses)
    assert "--solver" in uses["train"] and "--list-layers" in uses["import"]


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_every_cli_subcommand_and_flag_shown_exists(name):
    top = cli_help()
    subcommands = set(re.search(r"\{([a-z_,-]+)\}", top)[1].split(","))
    problems = []
    for sub, flags in sorted(cli_uses(DOCUMENTS[name], name).items()):
        if sub not in subcommands:
            problems.append(f"{name}: keras-caffe {sub}: no such subcommand "
                            f"({sorted(subcommands)})")
            continue
        known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", cli_help(sub)))
        problems += [f"{line}: keras-caffe {sub} {flag}: no such flag"
                     for flag, line in sorted(flags.items()) if flag not in known]
    assert problems == []


def test_the_flag_check_finds_a_wrong_flag():
    """The extraction sees flags in code blocks and inline code."""
    text = ("Text `keras-caffe needs TensorFlow` and `keras-caffe import`.\n"
            "```\nkeras-caffe train --solver s.prototxt --no-such-flag 2>&1 | tee x\n```\n"
            "Inline: `keras-caffe time --model m --bogus`.\n")
    uses = cli_uses(text, "t.md")
    assert uses["import"] == {} and "needs" not in uses
    assert uses["train"]["--no-such-flag"] == "t.md:3"
    assert "--no-such-flag" in uses["train"] and "--bogus" in uses["time"]
    assert "tee" not in uses and "-x" not in uses["train"]
