#!/usr/bin/env bash
# gpu-probe.sh — record the facts the CUDA backend will build on, on a GPU
# machine: where libcuda, libcublasLt, libcublas, libnvrtc and libnccl live
# (system paths and the nvidia/*/lib folders of Python's pip packages), their
# versions, nvidia-smi, and torch's bf16 matmul rate at 8192³.
#
# Usage: OUT=/some/dir bash scripts/gpu-probe.sh   (OUT defaults to ./gpu-probe-out)
# Each stage appends to $OUT/probe.txt, so a cut-off run still reports.
set -u
OUT=${OUT:-./gpu-probe-out}
mkdir -p "$OUT"
log="$OUT/probe.txt"
stage() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)" | tee -a "$log"; }
run() { echo "\$ $*" >>"$log"; timeout "${T:-60}" "$@" >>"$log" 2>&1; echo "[exit $?]" >>"$log"; }

stage "machine"
run uname -a
run nproc
run free -g

stage "nvidia-smi"
run nvidia-smi
run nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv

stage "libraries known to the dynamic linker"
for lib in libcuda libcublasLt libcublas libnvrtc libnccl libcudart; do
  echo "-- $lib" >>"$log"
  ldconfig -p 2>/dev/null | grep -E "$lib\.so" >>"$log" || echo "(not in ldconfig cache)" >>"$log"
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>"$log"

stage "libraries on disk (system and CUDA toolkits)"
T=120 run sh -c 'find / -xdev \( -name "libcuda.so*" -o -name "libcublasLt.so*" -o -name "libcublas.so*" -o -name "libnvrtc.so*" -o -name "libnccl.so*" -o -name "libnvrtc-builtins.so*" \) 2>/dev/null | sort | head -200'

stage "python and its nvidia packages"
for py in python3 python; do
  command -v "$py" >/dev/null || continue
  run "$py" -c 'import sys; print(sys.executable, sys.version)'
  run "$py" -c '
import importlib.util, os, glob, site
paths = set(site.getsitepackages() + [site.getusersitepackages()])
for p in sorted(paths):
    for d in sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib"))):
        print(d)
        for f in sorted(os.listdir(d)):
            print("   ", f)
'
  run "$py" -m pip list 2>/dev/null
  break
done

stage "versions"
run sh -c 'nvcc --version 2>/dev/null || echo "nvcc not installed"'
run python3 -c '
import ctypes, ctypes.util
def ver(name, fn):
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        print(name, "not loadable:", e); return
    v = ctypes.c_int()
    try:
        getattr(lib, fn)(ctypes.byref(v)); print(name, fn, v.value)
    except Exception as e:
        print(name, "loaded; no", fn, e)
ver("libcuda.so.1", "cuDriverGetVersion")
for n in ["libnccl.so.2", "libnccl.so"]:
    ver(n, "ncclGetVersion")
try:
    nv = ctypes.CDLL("libnvrtc.so")
except OSError:
    nv = None
if nv:
    a, b = ctypes.c_int(), ctypes.c_int()
    nv.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)); print("nvrtc", a.value, b.value)
'

stage "torch"
T=300 run python3 -c '
import time, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
    print("torch lib dir:", __import__("os").path.dirname(torch.__file__) + "/lib")
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3): a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        t = time.perf_counter(); a @ b; torch.cuda.synchronize(); times.append(time.perf_counter() - t)
    times.sort()
    print("bf16 matmul 8192^3: %.1f TFLOP/s (median of 10)" % (2 * n**3 / times[5] / 1e12))
    try:
        import transformers; print("transformers", transformers.__version__)
    except ImportError:
        print("transformers not installed")
'
stage "done"
echo "probe written to $log"
