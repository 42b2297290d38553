#!/usr/bin/env bash
# Build BVLC Caffe (CPU only, OpenBLAS, Release) into a cache outside the
# repository, for benchmarks/train_vs_caffe.py's side-by-side measurements.
#
#   benchmarks/build_caffe.sh [--source GIT_URL_OR_DIR] [--commit SHA] [--cache DIR]
#
# Prints the path of the `caffe` binary as its last line of stdout.
# Idempotent: when <cache>/caffe-<commit>/build/tools/caffe exists it is reused.
#
# What it does (../shared/notes/caffe-build.md):
#   1. the Debian packages Caffe needs, installed with apt-get when missing and
#      when run as root (otherwise it names the missing ones and stops);
#   2. the source: a git clone of BVLC/caffe (default https://github.com/BVLC/caffe.git,
#      or a local mirror given by --source / $CAFFE_SOURCE) checked out at the
#      pinned commit (9b891540, the one the golden data in ../shared/golden used);
#   3. the source change today's libraries need: protobuf >= 3.6's
#      CodedInputStream::SetTotalBytesLimit takes one argument (Caffe passes two
#      in src/caffe/util/io.cpp), an exact text edit that fails loudly if the source
#      differs. pycaffe is not built (-DBUILD_python=OFF: `caffe train` is all the
#      benchmark runs), so the note's Boost `python311` change is not needed;
#   4. cmake -DCPU_ONLY=ON -DUSE_OPENCV=OFF -DBLAS=Open -DCMAKE_BUILD_TYPE=Release,
#      then `nice -n 19 make -j2 caffe.bin` (the machine is shared: always niced).
#
# Build time, 2-core AMD EPYC: 2.4 min from a local clone to the binary (quiet machine,
# 2026-11-28); 17.5 min all told when issue 38 was filed (loaded). Never run by tests or CI.
set -euo pipefail

SOURCE="${CAFFE_SOURCE:-https://github.com/BVLC/caffe.git}"
COMMIT="${CAFFE_COMMIT:-9b891540183ddc834a02b2bd81b31afae71b2153}"
CACHE="${KERAS_CAFFE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/keras-caffe}"
JOBS="${CAFFE_BUILD_JOBS:-2}"

while [ $# -gt 0 ]; do
  case "$1" in
    --source) SOURCE="$2"; shift 2 ;;
    --commit) COMMIT="$2"; shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "build_caffe.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

PACKAGES="cmake g++ make git libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev
  libhdf5-dev libopenblas-dev libboost-system-dev libboost-thread-dev libboost-filesystem-dev
  liblmdb-dev libleveldb-dev libsnappy-dev"

log() { echo "build_caffe: $*" >&2; }

install_packages() {
  local missing=()
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    log "missing Debian packages (run as root, or install them): ${missing[*]}"
    exit 1
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# Exact text edit: FILE must contain OLD exactly once (or NEW already: a rerun).
edit() {
  local file="$1" old="$2" new="$3"
  python3 - "$file" "$old" "$new" <<'EOF'
import os, sys
path, old, new = sys.argv[1:]
text = open(path).read()
if new in text and old not in text:
    sys.exit(0)
if text.count(old) != 1:
    sys.exit(f"build_caffe: {path}: expected exactly one {old!r}, found {text.count(old)}: "
             "the source differs from the pinned commit's")
tmp = path + ".tmp"
with open(tmp, "w") as f:
    f.write(text.replace(old, new))
os.replace(tmp, path)
EOF
}

ROOT="$CACHE/caffe-${COMMIT:0:8}"
BIN="$ROOT/build/tools/caffe"
if [ -x "$BIN" ]; then
  log "cached: $BIN"
  echo "$BIN"
  exit 0
fi

install_packages
mkdir -p "$ROOT"
if [ ! -d "$ROOT/src/.git" ]; then
  log "git clone $SOURCE"
  rm -rf "$ROOT/src.tmp"
  git clone --quiet "$SOURCE" "$ROOT/src.tmp" >&2
  git -C "$ROOT/src.tmp" -c advice.detachedHead=false checkout --quiet "$COMMIT" >&2
  mv "$ROOT/src.tmp" "$ROOT/src"
fi
actual="$(git -C "$ROOT/src" rev-parse HEAD)"
case "$actual" in
  "$COMMIT"*) ;;
  *) log "$ROOT/src is at $actual, not $COMMIT"; exit 1 ;;
esac

edit "$ROOT/src/src/caffe/util/io.cpp" \
  "coded_input->SetTotalBytesLimit(kProtoReadBytesLimit, 536870912);" \
  "coded_input->SetTotalBytesLimit(kProtoReadBytesLimit);"

mkdir -p "$ROOT/build"
cd "$ROOT/build"
if [ ! -f Makefile ]; then
  nice -n 19 cmake "$ROOT/src" -DCPU_ONLY=ON -DUSE_OPENCV=OFF -DBLAS=Open \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_python=OFF -DBUILD_python_layer=OFF \
    -DBUILD_docs=OFF -DBUILD_matlab=OFF >&2
fi
log "nice -n 19 make -j$JOBS caffe.bin (2.4 to 17.5 min on 2 cores, with the load)"
nice -n 19 make -j"$JOBS" caffe.bin >&2
[ -x "$BIN" ] || { log "no $BIN after the build"; exit 1; }
echo "$BIN"
