#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks.md and docs/gpu.md in one prepared run, on the JAX
# backend (no TensorFlow needed), each case in its own processes under a time limit, its JSON
# written under $OUT as soon as it ends (a case cut short loses only itself):
#
#   env          the GPU, driver and versions (log.txt)
#   determinism  two `cvbench train --deterministic --seed 1` runs side by side, and two with
#                the seed alone, compared bit for bit (scripts/compare_runs.py):
#                determinism.json
#   bench        `cvbench benchmark` ResNet-50 training on every local device: fp16, fp16
#                through keras.distribution on one device (--devices 1), bf16, and fp16
#                with XLA's deterministic kernels (what --deterministic costs): bench_*.json
#   grain        photo-like JPEG records generated here (no TensorFlow: cvbench's own record
#                framing), then `cvbench train` ResNet-50 fp16 batch 256 from them through
#                grain (--data-backend grain, a worker process per core) and on the synthetic
#                batch, the same flags in the same run: grain.json (images/s of both, ratio)
#   sweep        benchmarks/gpu_sweep.py (XLA flags, host syncs, bf16, batches, Inception V3,
#                SSD320, inference, profiles) in the time left: sweep/sweep.json, sweep.md
#                (not in the default CASES: alone it needs ~8 minutes)
#   suite        benchmarks/train_throughput.py, cvbench beside keras.applications and
#                (where PyTorch is) torchvision, in the time left: suite.json, suite.md
#
#   OUT=results BUDGET=560 benchmarks/gpu_run.sh          # a GPU machine
#   OUT=results BUDGET=560 CASES=grain,sweep benchmarks/gpu_run.sh  # what is still open
#   OUT=/tmp/g TINY=1 BUDGET=900 benchmarks/gpu_run.sh    # tiny sizes, any CPU (its test)
#
# Variables: OUT (results folder, default gpu_results), BUDGET (seconds for the whole run,
# default 560), CASES (comma-separated, in the order above whatever the order given; default
# determinism,bench,grain,suite), SWEEP_CASES (gpu_sweep.py --cases, default all), TINY=1
# (tiny models and sizes), PYTHON (default python3), WHEELS (a folder of wheels to install
# first with pip --target, for a machine without network or Keras).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-gpu_results}
BUDGET=${BUDGET:-560}
PY=${PYTHON:-python3}
CASES=${CASES:-determinism,bench,grain,suite}
for case in ${CASES//,/ }; do
    case $case in
    determinism | bench | grain | sweep | suite) ;;
    *)
        echo "gpu_run: unknown case '$case' in CASES (determinism, bench, grain, sweep, suite)"
        exit 2
        ;;
    esac
done
# want CASE: whether CASES names it.
want() { [[ ",$CASES," == *",$1,"* ]]; }
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2

if [ -n "${WHEELS:-}" ]; then
    site=$(mktemp -d)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$WHEELS"/*.whl || { echo "gpu_run: installing $WHEELS failed"; exit 1; }
    export PYTHONPATH="$site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

if [ "${TINY:-0}" = 1 ]; then
    DET=(--model resnet18 --image-size 32 --batch-size 4 --steps-per-epoch 3)
    BENCH=(--model resnet18 --image-size 32 --batch-size 4 --steps 4 --burn-in 1 --log-every 2)
    SUITE=(--models resnet50,ssd320 --image-size 64 --batch-size 2 --ssd-batch-size 2
        --warmup 1 --windows 2 --window-steps 1 --latency-batch-sizes 1 --latency-calls 2)
    GRAIN=(--model resnet18 --image-size 32 --batch-size 4 --epochs 2 --log-every 2 --burn-in 1)
    GRAIN_RECORDS=(16 48 64 2)  # images, height, width, shards
else
    DET=(--model resnet50 --image-size 128 --batch-size 64 --steps-per-epoch 8)
    BENCH=(--model resnet50 --batch-size 256 --steps 60 --burn-in 10 --log-every 10)
    SUITE=(--window-steps 20)
    # 2,560 records: 10 steps of 256 an epoch, 6 epochs; 500 x 375 q90 JPEGs (ImageNet's
    # most common size), 16 shards written in parallel
    GRAIN=(--model resnet50 --batch-size 256 --epochs 6 --log-every 10 --burn-in 10)
    GRAIN_RECORDS=(2560 375 500 16)
fi

left() { echo $((BUDGET - SECONDS)); }
# case_limit CAP: the seconds a case may take: CAP, or what the budget leaves (minus 20).
case_limit() {
    local limit=$(($(left) - 20))
    [ "$limit" -gt "$1" ] && limit=$1
    echo "$limit"
}
# run_case NAME CAP COMMAND...: runs COMMAND under its case limit, or skips it.
run_case() {
    local name=$1 limit
    limit=$(case_limit "$2")
    shift 2
    if [ "$limit" -lt 30 ]; then
        echo "== $name: skipped, $(left) s of the budget left"
        return 0
    fi
    echo "== $name (at most $limit s; $(left) s left)"
    timeout -k 10 "$limit" "$@"
    echo "== $name: exit $? after ${SECONDS} s"
}

echo "== env"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi"
"$PY" - <<'PYTHON'
import importlib, platform
print("python", platform.python_version())
for name in ("jax", "jaxlib", "keras", "numpy", "torch", "torchvision"):
    try:
        print(name, importlib.import_module(name).__version__)
    except ImportError:
        print(name, "not installed")
import jax
print("devices", jax.devices())
import cvbench.training  # noqa: F401 (fails here, not in every case, when something is missing)
PYTHON
[ $? = 0 ] || { echo "gpu_run: the environment check failed"; exit 1; }

# determinism: four seeded training runs side by side (two with --deterministic), then
# compared bit for bit. Four processes on one GPU: no preallocation, so that they fit.
train() {  # train LIMIT LOG_DIR [FLAGS...]
    local limit=$1 dir=$2
    shift 2
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -k 10 "$limit" "$PY" -m cvbench train \
        --backend jax "${DET[@]}" --synthetic --epochs 1 --seed 1 --checkpoint-every 2 \
        --keep-checkpoints 100 --log-every 1 --burn-in 0 --eval none --no-export \
        --no-progress --log-dir "$dir" "$@" > "$dir.log" 2>&1
    echo "$(basename "$dir"): exit $?"
}
determinism_case() {
    limit=$(case_limit 240)
    echo "== determinism (at most $limit s; $(left) s left)"
    runs=$(mktemp -d)
    pids=()
    for run in det_a det_b seed_a seed_b; do
        flags=()
        [ "${run%_*}" = det ] && flags=(--deterministic)
        train "$limit" "$runs/$run" "${flags[@]}" &
        pids+=($!)
    done
    wait "${pids[@]}"  # (a bare wait would also wait for the tee of the log)
    grep -h -m1 "precision" "$runs/det_a.log"
    tail -n 4 "$runs/det_a.log"
    for pair in det seed; do
        "$PY" scripts/compare_runs.py "$runs/${pair}_a" "$runs/${pair}_b" --json "$runs/$pair.json"
    done
    "$PY" - "$runs" "$OUT/determinism.json" <<'PYTHON'
import json, sys
from pathlib import Path
runs = Path(sys.argv[1])
out = {}
for name, flags in (("det", "--deterministic --seed 1"), ("seed", "--seed 1")):
    path = runs / f"{name}.json"
    out[flags] = json.loads(path.read_text()) if path.is_file() else "no result"
Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + "\n")
PYTHON
    echo "== determinism: done after ${SECONDS} s"
}
want determinism && determinism_case

# bench: cvbench benchmark on every local device (the Trainer's keras.distribution path).
# fp16_distribution: --devices 1, the keras.distribution path on one device (auto takes it
# only for several devices), to show what the path costs.
want bench && for case in fp16 fp16_distribution bf16 fp16_deterministic; do
    vars=() flags=()
    [ "$case" = fp16_deterministic ] && vars=(XLA_FLAGS=--xla_gpu_deterministic_ops=true)
    [ "$case" = fp16_distribution ] && flags=(--devices 1)
    run_case "bench_$case" 150 env "${vars[@]}" "$PY" -m cvbench benchmark "${BENCH[@]}" \
        --synthetic --precision "${case%%_*}" "${flags[@]}" --json "$OUT/bench_$case.json"
done

# grain: records generated on this machine, then ResNet-50 fp16 from them through grain and on
# the synthetic batch (the same flags, steps and epochs).
grain_case() {
    local runs records workers
    runs=$(mktemp -d)
    records="$runs/records"
    workers=$(($(nproc) - 2))
    [ "$workers" -lt 1 ] && workers=1
    "$PY" - "$records" "${GRAIN_RECORDS[@]}" <<'PYTHON' || return 1
import multiprocessing, os, sys, time
from pathlib import Path
from cvbench.benchmark.input_bench import describe_records, write_benchmark_records

out, (images, height, width, shards) = Path(sys.argv[1]), map(int, sys.argv[2:])

def shard(k):  # one shard per process: its images, renamed into the split's shard names
    part = out / f"part{k}"
    n = len(range(k, images, shards))
    size = write_benchmark_records(part, num_images=n, height=height, width=width,
                                   num_shards=1, seed=k)
    (part / "train-00000-of-00001").rename(out / f"train-{k:05d}-of-{shards:05d}")
    part.rmdir()
    return size

if __name__ == "__main__":
    out.mkdir(parents=True)
    start = time.perf_counter()
    with multiprocessing.Pool(min(shards, os.cpu_count() or 1)) as pool:
        total = sum(pool.map(shard, range(shards)))
    print("grain records:", describe_records(images, total, height, width),
          f"written in {time.perf_counter() - start:.1f} s")
PYTHON
    local common=(--backend jax "${GRAIN[@]}" --num-classes 1000 --precision fp16 --seed 1 --eval none
        --no-export --no-progress)
    "$PY" -m cvbench train "${common[@]}" --data-dir "$records" --data-backend grain \
        --data-workers "$workers" --log-dir "$runs/grain" > "$runs/grain.log" 2>&1
    echo "grain run: exit $? ($workers workers)"
    tail -n 3 "$runs/grain.log"
    local steps
    steps=$(grep -o "[0-9]* steps per epoch" "$runs/grain.log" | head -n1 | cut -d' ' -f1)
    "$PY" -m cvbench train "${common[@]}" --synthetic --steps-per-epoch "${steps:-10}" \
        --log-dir "$runs/synthetic" > "$runs/synthetic.log" 2>&1
    echo "synthetic run: exit $?"
    "$PY" - "$runs" "$OUT/grain.json" "$workers" <<'PYTHON'
import json, sys
from pathlib import Path
runs, out, workers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
result = {"data_workers": workers}
for name in ("grain", "synthetic"):
    log = runs / name / "train_log.jsonl"
    events = [json.loads(l) for l in log.read_text().splitlines()] if log.is_file() else []
    rates = [e for e in events if e.get("event") == "throughput"]
    result[name] = rates[-1] if rates else None
if result["grain"] and result["synthetic"]:
    result["ratio"] = result["grain"]["mean"] / result["synthetic"]["mean"]
    print(f"grain: {result['grain']['mean']:.1f} img/s, synthetic "
          f"{result['synthetic']['mean']:.1f} img/s, ratio {result['ratio']:.2f}")
out.write_text(json.dumps(result, indent=1) + "\n")
PYTHON
}
limit=$(case_limit 300)
if ! want grain; then
    :
elif [ "$limit" -lt 30 ]; then
    echo "== grain: skipped, $(left) s of the budget left"
else
    echo "== grain (at most $limit s; $(left) s left)"
    export -f grain_case
    export PY OUT
    GRAIN_FLAGS="${GRAIN[*]}" GRAIN_RECORDS_FLAGS="${GRAIN_RECORDS[*]}" timeout -k 10 "$limit" \
        bash -c 'GRAIN=($GRAIN_FLAGS); GRAIN_RECORDS=($GRAIN_RECORDS_FLAGS); grain_case'
    echo "== grain: exit $? after ${SECONDS} s"
fi

# sweep: benchmarks/gpu_sweep.py in the time left (before the suite, which takes what is left).
if want sweep; then
    sweep_flags=(--out "$OUT/sweep" --python "$PY")
    [ "${TINY:-0}" = 1 ] && sweep_flags+=(--tiny)
    [ -n "${SWEEP_CASES:-}" ] && sweep_flags+=(--cases "$SWEEP_CASES")
    run_case sweep 900 "$PY" benchmarks/gpu_sweep.py "${sweep_flags[@]}" \
        --budget $(($(left) - 40))
fi

# suite: in the time left, with torchvision where PyTorch is.
torch_flag=()
"$PY" -c "import torch, torchvision" 2> /dev/null && torch_flag=(--torch-reference)
want suite && run_case suite 900 "$PY" benchmarks/train_throughput.py "${SUITE[@]}" --precisions fp16 \
    "${torch_flag[@]}" --time-budget $(($(left) - 90)) --json "$OUT/suite.json" \
    --markdown "$OUT/suite.md"

echo "== summary (${SECONDS} s)"
"$PY" - "$OUT" <<'PYTHON'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| case | images/s (mean +/- stderr) | devices | global batch |")
print("|---|---|---|---|")
for path in sorted(out.glob("bench_*.json")):
    r = json.loads(path.read_text())
    stderr = "-" if r["stderr"] is None else f"{r['stderr']:.1f}"
    print(f"| {path.stem[6:]} | {r['mean']:.1f} +/- {stderr} | {r['devices']} "
          f"| {r['global_batch']} |")
grain = out / "grain.json"
if grain.is_file():
    r = json.loads(grain.read_text())
    if r.get("ratio") is not None:
        print(f"grain records vs synthetic: {r['grain']['mean']:.1f} vs "
              f"{r['synthetic']['mean']:.1f} img/s, ratio {r['ratio']:.2f}")
sweep = out / "sweep" / "sweep.md"
if sweep.is_file():
    print(sweep.read_text().rstrip())
det = out / "determinism.json"
if det.is_file():
    for flags, r in json.loads(det.read_text()).items():
        same = r["identical"] if isinstance(r, dict) else r
        print(f"determinism, {flags}: identical={same}")
PYTHON
