#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool): verify every kernel variant against the
# reference and record it, profile AlexNet at batch 128 with the events backend, run the `gpu`
# tests, the kernel benchmark (benchmarks/RESULTS.md), compute-sanitizer (memcheck, racecheck)
# over a selftest of every variant; then pass 2 (issue 5): ncu's metric listing for this GPU,
# the batch-16 fixture database and its report, and the wall time of the ncu backend against
# `ncu --set full` on the same workload; the issue-6 experiments and reports. Pass 2 is skipped
# with TRACKER_SKIP_NCU=1, the experiments with TRACKER_SKIP_EXPERIMENTS=1.
# Everything lands in $OUT. NOT YET RUN ON A GPU: the first session with one runs it.
#
# The device machine has CuPy, NumPy, pandas and click but no SQLAlchemy: carry it as wheels
# (device README, "a Python package missing there"), e.g. in the repo root here:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl sqlalchemy
# then run: command "bash tools/gpu_session.sh", carry [".whl"].
set -uo pipefail
out=${OUT:-/tmp/tracker-gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:$PWD" || exit 1
fi
tracker() { python3 -m tracker "$@"; }

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.csv"
ncu --version > "$out/ncu-version.txt" 2>&1
tracker selftest --batch 2 --record --format csv > "$out/selftest.csv" 2> "$out/selftest.log"
echo "selftest exit $?: $(tail -n 2 "$out/selftest.log" | tr '\n' ' ')"
cp tests/data/verified/*.json "$out/" 2>/dev/null
tracker profile alexnet --batch 128 --backend events --repeat 5 --db "$out/trace.db" 2>&1 | tee "$out/profile.log"
tracker show last --db "$out/trace.db" --format csv > "$out/show.csv"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$out/pytest-gpu.log"
python3 benchmarks/kernels.py --out "$out/RESULTS.md" 2>&1 | tee "$out/benchmark.log"
for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --print-limit 20 python3 -m tracker selftest --batch 1 --l1 ca \
        > "$out/sanitizer-$tool.log" 2>&1
    echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -n 1)"
done

# Issue 6: the experiments at batch 128 on CUDA-event times (fast), their reports, and fusion once
# more under ncu for the DRAM bytes it saves. Skipped with TRACKER_SKIP_EXPERIMENTS=1. The reports
# need matplotlib and seaborn: carry their wheels too if the device lacks them.
if [ -z "${TRACKER_SKIP_EXPERIMENTS:-}" ]; then
    exp_db="$out/experiments-b128.db"
    for kind in l1-bypass fusion variants; do
        tracker experiment "$kind" alexnet --batch 128 --backend events --repeat 5 --db "$exp_db" --format csv \
            > "$out/experiment-$kind.csv" 2> "$out/experiment-$kind.log"
        echo "experiment $kind exit $?: $(tail -n 1 "$out/experiment-$kind.log")"
    done
    tracker experiment batch alexnet --batches 16,64,128 --backend events --repeat 5 --db "$exp_db" --format csv \
        > "$out/experiment-batch.csv" 2> "$out/experiment-batch.log"
    for e in e1 e2 e3 e4; do tracker report "$e" --db "$exp_db" --out "$out/report-$e" > "$out/report-$e.log" 2>&1; done
    tracker report 1 --db "$exp_db" --out "$out/report-run1" > "$out/report-run1.log" 2>&1
    [ -z "${TRACKER_SKIP_NCU:-}" ] && tracker experiment fusion alexnet --batch 128 --backend ncu --repeat 1 \
        --db "$out/fusion-ncu-b128.db" --format csv > "$out/experiment-fusion-ncu.csv" 2> "$out/experiment-fusion-ncu.log"
fi

[ -n "${TRACKER_SKIP_NCU:-}" ] && exit 0
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr 'A-Z ' 'a-z-')
ncu --query-metrics > "$out/ncu-query-metrics-$gpu.txt" 2>&1
echo "query-metrics: $(wc -l < "$out/ncu-query-metrics-$gpu.txt") lines"
tracker profile alexnet --batch 16 --backend ncu --repeat 1 --db "$out/alexnet-b16-$gpu.db" \
    --ncu-report "$out/alexnet-b16-$gpu.ncu-rep" 2>&1 | tee "$out/profile-ncu-b16.log"
for page in raw details; do
    ncu --import "$out/alexnet-b16-$gpu.ncu-rep" --csv --page "$page" --print-units base > "$out/ncu-$page-alexnet-b16-$gpu.csv"
done
tracker sql "SELECT * FROM stall_breakdown" --db "$out/alexnet-b16-$gpu.db" --format csv > "$out/stalls-b16.csv"
start=$(date +%s.%N)
tracker profile alexnet --batch 128 --backend ncu --repeat 1 --db "$out/alexnet-b128-ncu.db" 2>&1 | tail -n 5 | tee "$out/profile-ncu-b128.log"
echo "tracker ncu backend, batch 128: $(echo "$(date +%s.%N) - $start" | bc) s" | tee "$out/wall.txt"
spec=$(python3 -c 'from tracker.gpu.workload import Workload; print(Workload("alexnet", batch=128).to_json())')
start=$(date +%s.%N)
ncu --set full --profile-from-start off --target-processes all -f -o "$out/full-b128" python3 -m tracker.gpu.workload "$spec" > "$out/ncu-full.log" 2>&1
echo "ncu --set full, batch 128: $(echo "$(date +%s.%N) - $start" | bc) s" | tee -a "$out/wall.txt"
rm -f "$out/full-b128.ncu-rep"  # large; the wall time is what we keep
for view in stall_breakdown cache_hit_rate; do
    tracker sql "SELECT * FROM $view WHERE phase != 'fwd'" --db "$out/alexnet-b128-ncu.db" --format csv > "$out/$view-b128.csv"
done
