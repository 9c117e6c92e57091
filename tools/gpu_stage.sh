#!/usr/bin/env bash
# tools/gpu_stage.sh STAGE — one call on the lent GPU machine (the device tool), STAGE 1 to 12 or suite (or digest: the sources' digest a stage's header prints).
#
#   1  preflight; selftest --record; a batch-1 ncu smoke profile (the join); events at batch 128;
#      this GPU's ncu --query-metrics; the batch-16 ncu fixture database with its raw CSV pages
#   2  the kernel benchmark; l1-bypass, fusion, variants and batch experiments on events; reports
#   3  compute-sanitizer memcheck, racecheck (the default tile and a 3-deep ring) and synccheck at
#      batch 1 (CuPy's pool off); the batch-128 ncu run and its wall time beside `ncu --set full`;
#      fusion under ncu
#   4  tracker tune alexnet --batch 128 (quick, then every tile shape) into one database, and
#      events profiles with the tuned tiles and --untuned; the database stays on the machine as
#      ./tuning-GPU.db (git-ignored) for stage 5
#   5  the kernel benchmark with stage 4's tuned tiles (RESULTS.md, tuned)
#   6  the library arm (issue 29): PyTorch's layer phases against the NumPy reference under the
#      selftest's bound (selftest --impl torch), and its whole step per layer as information;
#      --impl torch on events at batch 128 and under ncu at batch 16 (raw CSV pages kept); the
#      library experiment at batch 128; a Kineto trace of one batch-16 step under our range names
#   7  the convolution algorithms (issue 30): selftest --record (the Winograd variants' first GPU
#      check, with every variant's max and mean error); the algorithms experiment at batch 128 on
#      events, beside the model's prediction of the same (tracker model --algorithm all)
#   8  fusion and L1 bypass on the fast loaders (issue 30): racecheck of the fused backward's mask
#      ring (default tile and a 3-deep ring); the fusion and l1-bypass experiments (with the staged
#      arms) at batch 128 on events
#   9  the new variants' speed (issues 30, 48): the kernel benchmark (RESULTS.md: every variant
#      against cuDNN's heuristic and best); tracker tune's race of every conv
#      algorithm (quick), then the tuned step beside the untuned and PyTorch's (events, batch 128)
#  10 the U-Nets (issue 45): unet2d ours and PyTorch's on events at batch 16 and under ncu at batch
#      2, compared; unet3d ours and PyTorch's on events (batch 1, 128^3), compared, and under ncu
#      (batch 1, 64^3); the up-convolutions' implicit GEMM against the gemm variant; `tracker tune`
#      of unet3d's 3-D convolutions; the memory study up to out of
#      memory (both implementations); paper 000's
#      what-ifs (unet2d: conv type and second-conv stride at batches 1 and 16)
#  11 CUPTI against ncu (issue 47): AlexNet at batch 128 under --backend cupti and --backend ncu into one
#      database (each command's wall time: the ratios), `tracker agree` of the two, and `ncu --set full`
#      of the same workload (timed); the library arm under cupti at batch 128 and 16, and under ncu at
#      16, agreed; torchvision's resnet18 at batch 32 through --torch under cupti (timed)
#  12 the training step's speed (issue 78): the kernel benchmark (each phase's kernels by their own
#      events, the host's overhead beside; RESULTS.md); the default plan's step (the conv rule, no
#      tuning table) beside --untuned (the implicit GEMM) and PyTorch's; tracker tune's race
#      (quick) and the tuned step; ncu of the forward with every conv by winograd_f4, then by fft
#  suite  the GPU suite (issue 43): `pytest -m gpu` on tests/test_gpu*.py, every command that needs
#      a GPU at small sizes, each test asserting what it stored or wrote; each test's time in the
#      log (stagesuite.tar.gz). Run it first in a GPU session: it says which paths work. The
#      kernels compiled ahead (tools/gpu_warm.py), the tests that need no counters on
#      TRACKER_SUITE_WORKERS xdist workers (6), then the `counters` tests one at a time;
#      TRACKER_SUITE_K='cupti or tune' runs only the tests pytest's -k selects
#
# Each stage fits one 10-minute command: every step runs under its own `timeout`, cut to what is
# left of the stage's budget (TRACKER_STAGE_BUDGET_S, default 560 s). Everything lands in a scratch
# folder; $OUT gets exactly two files whatever happens: stageN.tar.gz (the folder) and summary.txt
# (one line per step: exit code, seconds, key figure). A failed step stops the stage where the
# next steps depend on it; TRACKER_STAGE_KEEP_GOING=1 runs the rest anyway, and
# TRACKER_STAGE_ONLY="step step ..." runs only those steps (after the preflight).
#
# The device machine lacks SQLAlchemy: carry its wheel (README, "On a GPU"):
#   device run: command "bash tools/gpu_stage.sh 1", carry [".whl"]
set -uo pipefail
stage=${1:-}
out=${OUT:-/tmp/tracker-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
# The device's copy of the work tree may carry an older .git than its files (2026-11-26: it said
# 2d76c47 for d7a1d7b's tree): the digest of the sources, which `bash tools/gpu_stage.sh digest`
# prints for any checkout, says which tree ran.
digest() { find tracker kernels tests -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort \
    | xargs sha256sum | sha256sum | cut -c1-12; }
[ "$stage" = digest ] && { digest; exit 0; }
case "$stage" in 1|2|3|4|5|6|7|8|9|10|11|12|suite) ;; *) note "usage: tools/gpu_stage.sh 1|2|...|12|suite (got '${stage}')"; exit 2 ;; esac

work=$(mktemp -d /tmp/tracker-stage.XXXXXX)
w="$work/stage$stage"
mkdir -p "$w"
pack() { cp "$summary" "$w/summary.txt"; tar -czf "$out/stage$stage.tar.gz" -C "$work" "stage$stage"; }
trap pack EXIT

export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD" MPLBACKEND=Agg
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        > "$w/wheels.log" 2>&1 && export PYTHONPATH="/tmp/site:$PWD"
fi
tracker() { python3 -m tracker "$@"; }
export -f tracker

deadline=$((SECONDS + ${TRACKER_STAGE_BUDGET_S:-560}))
usec() { echo "${EPOCHREALTIME/./}"; }

# step NAME LIMIT_S 'COMMAND': runs COMMAND in bash under timeout (cut to the stage's budget),
# output in $w/NAME.log; the key figure is $w/NAME.key if the command wrote one, else the log's
# last line. Returns the command's exit code (124: timed out).
step() {
    local name=$1 limit=$2 command=$3 left rc t0 tenths key
    if [ -n "${TRACKER_STAGE_ONLY:-}" ] && [[ " $TRACKER_STAGE_ONLY preflight " != *" $name "* ]]; then
        return 0  # not asked for this time
    fi
    left=$((deadline - SECONDS - 15))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        printf '%-20s rc=%-3s %6ss  %s\n' "$name" skip 0 "no time left in the stage" | tee -a "$summary"
        return 124
    fi
    t0=$(usec)
    timeout --kill-after=10 "$limit" bash -c "$command" > "$w/$name.log" 2>&1
    rc=$?
    tenths=$((($(usec) - t0) / 100000))
    key=$(cat "$w/$name.key" 2>/dev/null || grep -v '^[[:space:]]*$' "$w/$name.log" | tail -n 1)
    ((rc == 124)) && key="timed out after ${limit}s; last: $key"
    printf '%-20s rc=%-3s %4d.%ds  %s\n' "$name" "$rc" $((tenths / 10)) $((tenths % 10)) "${key:0:220}" \
        | tee -a "$summary"
    return $rc
}
# stop_unless_ok RC WHY: end the stage after a failed step the rest depends on.
stop_unless_ok() {
    (($1 == 0)) && return 0
    [ -n "${TRACKER_STAGE_KEEP_GOING:-}" ] && { note "  (continuing: TRACKER_STAGE_KEEP_GOING)"; return 0; }
    note "stage $stage stopped: $2"
    exit 1
}

note "tracker GPU stage $stage, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "($(git status --porcelain 2>/dev/null | wc -l) paths differ from it), sources $(digest)"
step preflight 120 'python3 tools/gpu_preflight.py'
stop_unless_ok $? "preflight failed (see preflight above; no GPU, or a missing tool or package)"
export W="$w" NCU="$(python3 -c 'from tracker.profilers.ncu import find; print(find() or "")')"
export SANITIZER="$(python3 -c 'from tracker.profilers.ncu import find_sanitizer; print(find_sanitizer() or "")')"
export GPU="$(python3 -c 'from tracker.gpu.cupy_backend import device_info; import re
print(re.sub("[^a-z0-9]+", "-", device_info()["device_name"].lower()).strip("-"))')"
nvidia-smi -q > "$w/nvidia-smi.txt" 2>&1
"$NCU" --version > "$w/ncu-version.txt" 2>&1

# export_pages REPORT STEM: ncu's raw page, by kernel and by NVTX range, as CSV beside the report.
export_pages() {
    "$NCU" --import "$1" --csv --page raw --print-units base > "$W/$2-raw.csv" 2> "$W/$2-raw.err"
    "$NCU" --import "$1" --csv --page raw --print-units base --print-nvtx-rename kernel > "$W/$2-raw-nvtx.csv" 2>&1
}
export -f export_pages

# ncu_full BATCH: `ncu --set full` over AlexNet's planned workload at BATCH, the child tracker's ncu
# pass runs (the wall time its step records: what tracker's collectors are compared with).
ncu_full() {
    local spec
    spec=$(python3 -c "from tracker.gpu.network import plan; from tracker.gpu.workload import Workload
w = Workload('alexnet', batch=$1)
print(w.planned(plan(w.net, w.variants, w.phases, w.batch, by_rule=True), {}).to_json())")
    "$NCU" --set full --profile-from-start off --target-processes all -f -o "/tmp/full-b$1" \
        python3 -m tracker.implementations.child profiled "$spec"
}
export -f ncu_full

# newest_run DB: the id of the newest run in the trace database DB, read right after the profile that
# made it, so that a step compares the runs its own commands made (ids counted by hand shift when an
# earlier step fails before its run, or times out between two)
newest_run() { tracker runs --db "$1" --format csv | tail -n 1 | cut -d, -f1; }
export -f newest_run

stage1() {
    step selftest 240 'tracker selftest --batch 2 --record --format csv > $W/selftest.csv
        rc=$?; cp tests/data/verified/*.json $W/ 2>/dev/null; exit $rc'
    stop_unless_ok $? "a kernel variant failed its check against the reference (selftest.csv)"
    step ncu-smoke-b1 200 'tracker profile alexnet --batch 1 --backend ncu --repeat 1 --db $W/smoke-b1.db \
        --ncu-report $W/smoke-b1.ncu-rep; rc=$?
        [ -f $W/smoke-b1.ncu-rep ] && export_pages $W/smoke-b1.ncu-rep smoke-b1; exit $rc'
    stop_unless_ok $? "the batch-1 ncu profile failed (its raw CSV pages are in the tarball when ncu wrote a report)"
    step events-b128 180 'tracker profile alexnet --batch 128 --backend events --repeat 5 --db $W/events-b128.db \
        && tracker show last --db $W/events-b128.db --format csv > $W/events-b128-show.csv \
        && grep "iteration 5/5" $W/events-b128.log > $W/events-b128.key'
    step query-metrics 60 '"$NCU" --query-metrics > $W/ncu-query-metrics-$GPU.txt &&
        echo "$(wc -l < $W/ncu-query-metrics-$GPU.txt) lines listed" > $W/query-metrics.key'
    step ncu-fixture-b16 300 'tracker profile alexnet --batch 16 --backend ncu --repeat 1 \
        --db $W/alexnet-b16-$GPU.db --ncu-report $W/b16.ncu-rep; rc=$?
        [ -f $W/b16.ncu-rep ] && export_pages $W/b16.ncu-rep alexnet-b16-$GPU && rm -f $W/b16.ncu-rep; exit $rc'
}

stage2() {
    # The experiments first: l1-bypass and fusion are the fixture the tests read.
    export EXP_DB="$w/experiments-b128.db"
    local kind limit
    for kind in l1-bypass:200 fusion:60 variants:120; do
        limit=${kind#*:} kind=${kind%:*}
        step "exp-$kind" "$limit" "tracker experiment $kind alexnet --batch 128 --backend events --repeat 5 \
            --db \$EXP_DB --format csv > \$W/experiment-$kind.csv"
    done
    step exp-batch 60 'tracker experiment batch alexnet --batches 16,64,128 --backend events --repeat 5 \
        --db $EXP_DB --format csv > $W/experiment-batch.csv'
    step benchmark 300 'python3 benchmarks/kernels.py --reps 10 --out $W/RESULTS.md'
    step reports 60 'for e in e1 e2 e3 e4; do tracker report $e --db $EXP_DB --out $W/report-$e || exit; done'
}

stage3() {
    step ncu-b128 200 'tracker profile alexnet --batch 128 --backend ncu --repeat 1 --db $W/alexnet-b128-ncu.db'
    step ncu-full-b128 200 'ncu_full 128'
    step exp-fusion-ncu 200 'tracker experiment fusion alexnet --batch 128 --backend ncu --repeat 1 \
        --db $W/fusion-ncu-b128.db --format csv > $W/experiment-fusion-ncu.csv'
    # CuPy's pool hands out slices of one allocation: an overrun into a neighbour would go unseen.
    # memcheck at AlexNet's shapes (batch 1); racecheck and synccheck, which slow shared-memory
    # kernels a thousandfold, on the small cases that reach every code path; racecheck again on
    # a 3-deep ring of cp.async k-tiles (the emulation's copies are synchronous: only a GPU shows
    # a wait_group that waits for too little).
    local check
    for check in "memcheck memcheck alexnet both" "racecheck racecheck small both" \
                 "synccheck synccheck small both" "racecheck-ring racecheck small ca --tile 128x128x8/stages3"; do
        set -- $check
        local name=$1 tool=$2 shapes=$3 l1=$4
        shift 4
        step "sanitizer-$name" 150 "TRACKER_CUPY_POOL=off \"\$SANITIZER\" --tool $tool --print-limit 20 \
            python3 -m tracker selftest --batch 1 --shapes $shapes --l1 $l1 $*; rc=\$?
            grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \$W/sanitizer-$name.log | tail -n 1 > \$W/sanitizer-$name.key
            exit \$rc"
    done
}

stage4() {
    # The schedule search (issue 16): every GEMM-shaped layer phase of AlexNet at batch 128, the
    # default tile's split-K counts first (quick), then every tile shape; the tuned tiles then
    # run in an events profile, beside an --untuned one.
    # --budget ends each search cleanly (its rows stored, its summary printed) before the step's timeout.
    step tune-quick 150 'tracker tune alexnet --batch 128 --quick --reps 5 --budget 120 --db $W/tuning-$GPU.db \
        --format csv > $W/tune-quick.csv'
    step tune-full 330 'tracker tune alexnet --batch 128 --reps 3 --budget 290 --db $W/tuning-$GPU.db --format csv \
        > $W/tune-full.csv'
    step events-tuned 60 'tracker profile alexnet --batch 128 --backend events --repeat 5 --db $W/tuning-$GPU.db \
        && tracker profile alexnet --batch 128 --backend events --repeat 5 --untuned --db $W/tuning-$GPU.db'
    step keep-tuning 10 'cp $W/tuning-$GPU.db tuning-$GPU.db'
}

stage5() {
    # The benchmark again, each GEMM-shaped launch on the tile stage 4 found fastest on this GPU.
    step benchmark-tuned 540 '[ -f tuning-$GPU.db ] || { echo "no tuning-$GPU.db here: run stage 4 first"; exit 3; }
        python3 benchmarks/kernels.py --reps 10 --db tuning-$GPU.db --out $W/RESULTS.md'
}

stage6() {
    # The library arm. First PyTorch's accuracy (issue 43), every layer phase alone through the
    # selftest's own checks and bounds (its summary line is the key; a failure names its layer,
    # phase and output in lib-check.log), then, as information only, the whole step's error per
    # layer against the float64 reference (lib-step.csv: compounded along the chain, it decides
    # nothing). The recordings below do not depend on it: a failed check does not stop the stage.
    step lib-check 150 'tracker selftest --impl torch --batch 2 --format csv > $W/lib-check.csv; rc=$?
        grep -E "^[0-9]+ passed, [0-9]+ failed on " $W/lib-check.log > $W/lib-check.key
        python3 -c "from tracker.library.accuracy import step_report; print(step_report(\"alexnet\", 2), end=\"\")" \
            > $W/lib-step.csv || echo "the whole-step comparison failed (information only)"
        exit $rc'
    step lib-events-b128 150 'tracker profile alexnet --batch 128 --impl torch --backend events --repeat 5         --db $W/library-b128-events-$GPU.db && tracker show last --db $W/library-b128-events-$GPU.db --format csv         > $W/library-b128-events-show.csv'
    step lib-ncu-b16 200 'tracker profile alexnet --batch 16 --impl torch --backend ncu --repeat 1         --db $W/library-b16-ncu-$GPU.db --ncu-report $W/lib-b16.ncu-rep; rc=$?
        [ -f $W/lib-b16.ncu-rep ] && export_pages $W/lib-b16.ncu-rep library-b16-$GPU && rm -f $W/lib-b16.ncu-rep
        tracker show last --db $W/library-b16-ncu-$GPU.db --format csv > $W/library-b16-ncu-show.csv; exit $rc'
    step exp-library-b128 150 'tracker experiment library alexnet --batch 128 --backend events --repeat 5         --db $W/library-experiment-b128-$GPU.db --format csv > $W/experiment-library.csv'
    step lib-trace-b16 60 'python3 -c "from tracker.gpu.workload import Workload
from tracker.library.torch_run import trace
trace(Workload(\"alexnet\", batch=16, implementation=\"torch\"), \"$W/pytorch-alexnet-b16-$GPU-kineto.json\", print)" \
        && gzip -9 $W/pytorch-alexnet-b16-$GPU-kineto.json'
}

stage7() {
    step selftest 240 'tracker selftest --batch 2 --record --format csv > $W/selftest.csv
        rc=$?; cp tests/data/verified/*.json $W/ 2>/dev/null; grep -c winograd $W/selftest.csv > $W/selftest.key; exit $rc'
    step exp-algorithms-b128 240 'tracker experiment algorithms alexnet --batch 128 --backend events --repeat 5 \
        --db $W/algorithms-b128-events-$GPU.db --format csv > $W/experiment-algorithms.csv'
    step model-algorithms 30 'tracker model alexnet --batch 128 --device h100 --algorithm all --format csv \
        > $W/model-algorithms-b128.csv'
}

stage8() {
    local ring
    for ring in 128x128x8 128x128x8/stages3; do
        step "racecheck-fused-${ring//\//-}" 90 "TRACKER_CUPY_POOL=off \"\$SANITIZER\" --tool racecheck --print-limit 20 \
            python3 -m tracker selftest --batch 1 --shapes small --l1 ca --tile $ring"
    done
    export EXP_DB="$w/fast-loaders-b128.db"
    step exp-fusion 90 'tracker experiment fusion alexnet --batch 128 --backend events --repeat 5 --db $EXP_DB \
        --format csv > $W/experiment-fusion.csv'
    step exp-l1-bypass 250 'tracker experiment l1-bypass alexnet --batch 128 --backend events --repeat 5 \
        --db $EXP_DB --format csv > $W/experiment-l1-bypass.csv'
}

stage9() {
    step benchmark 250 'python3 benchmarks/kernels.py --reps 10 --out $W/RESULTS.md'
    # the race (issue 48 item 4): every algorithm of every conv layer phase, then the step it chose
    # beside the plan's and PyTorch's, in one database
    export T_DB="$W/tuning-race-$GPU.db"
    step tune-race 200 'tracker tune alexnet --batch 128 --quick --reps 3 --budget 180 --db $T_DB --format csv \
        > $W/tune-race.csv'
    step tuned-step 90 'tracker profile alexnet --batch 128 --backend events --repeat 5 --db $T_DB \
        && tracker profile alexnet --batch 128 --backend events --repeat 5 --untuned --db $T_DB \
        && tracker profile alexnet --batch 128 --impl torch --backend events --repeat 5 --db $T_DB \
        && tracker runs --db $T_DB --format csv > $W/tuned-step-runs.csv'
}

stage12() {
    step benchmark 250 'python3 benchmarks/kernels.py --reps 10 --out $W/RESULTS.md'
    # the default plan (the conv rule: no tuning table in this database) beside --untuned and PyTorch's
    export S_DB="$W/steps-b128-$GPU.db"
    step plan-steps 90 'tracker profile alexnet --batch 128 --backend events --repeat 5 --db $S_DB \
        && tracker profile alexnet --batch 128 --backend events --repeat 5 --untuned --db $S_DB \
        && tracker profile alexnet --batch 128 --impl torch --backend events --repeat 5 --db $S_DB \
        && tracker runs --db $S_DB --format csv > $W/plan-steps-runs.csv'
    step tune-race 120 'tracker tune alexnet --batch 128 --quick --reps 3 --budget 100 --db $S_DB --format csv \
        > $W/tune-race.csv && tracker profile alexnet --batch 128 --backend events --repeat 5 --db $S_DB \
        && tracker runs --db $S_DB --format csv > $W/plan-steps-runs.csv'
    step ncu-fast-convs 150 'tracker profile alexnet --batch 128 --phases fwd --variant conv=winograd_f4 --backend ncu \
        --repeat 1 --db $W/fast-convs-ncu-$GPU.db && tracker profile alexnet --batch 128 --phases fwd --variant conv=fft \
        --backend ncu --repeat 1 --db $W/fast-convs-ncu-$GPU.db'
}

stage10() {
    export U_DB="$w/unets-$GPU.db"
    step unet2d-events 90 'tracker profile unet2d --batch 16 --backend events --repeat 5 --db $U_DB \
        && a=$(newest_run $U_DB) && tracker profile unet2d --batch 16 --impl torch --backend events --repeat 5 \
        --db $U_DB && tracker compare $a $(newest_run $U_DB) --db $U_DB --format csv > $W/unet2d-compare-b16.csv'
    # each ncu profile a step of its own: on an H200 (2026-11-26) ours at unet2d's batch 2 took
    # about 116 s (193 launches), and one step's limit cut the next profile and lost it
    step unet2d-ncu 150 'tracker profile unet2d --batch 2 --backend ncu --repeat 1 --db $U_DB'
    step unet2d-ncu-torch 180 'tracker profile unet2d --batch 2 --impl torch --backend ncu --repeat 1 --db $U_DB'
    step unet3d-events 150 'tracker profile unet3d --batch 1 --backend events --repeat 3 --db $U_DB \
        && a=$(newest_run $U_DB) && tracker profile unet3d --batch 1 --impl torch --backend events --repeat 3 \
        --db $U_DB && tracker compare $a $(newest_run $U_DB) --db $U_DB --format csv > $W/unet3d-compare-b1.csv'
    step unet3d-ncu 240 'tracker profile unet3d --batch 1 --input-size 64 --backend ncu --repeat 1 --db $U_DB'
    step unet3d-ncu-torch 240 'tracker profile unet3d --batch 1 --input-size 64 --impl torch --backend ncu \
        --repeat 1 --db $U_DB'
    # the transposed convolution's gemm forward (one GEMM and a scatter) against the implicit GEMM's
    step upconv-ways 90 'V_DB=$W/upconv-$GPU.db; tracker profile unet3d --batch 1 --variant convtranspose3d=shared \
        --backend events --repeat 3 --db $V_DB && a=$(newest_run $V_DB) && tracker profile unet3d --batch 1 \
        --variant convtranspose3d=gemm --backend events --repeat 3 --db $V_DB && tracker compare $a \
        $(newest_run $V_DB) --db $V_DB --format csv > $W/upconv-implicit-vs-gemm.csv'
    step concat-ways 90 'C_DB=$W/concat-$GPU.db; tracker profile unet3d --batch 1 --variant concat=global --backend events \
        --repeat 5 --db $C_DB && a=$(newest_run $C_DB) && tracker profile unet3d --batch 1 --variant concat=inplace \
        --backend events --repeat 5 --db $C_DB && tracker compare $a $(newest_run $C_DB) --db $C_DB --format csv \
        > $W/concat-copy-vs-inplace.csv'
    step unet3d-tune 150 'tracker tune unet3d --batch 1 --quick --reps 3 --budget 140 --db $W/tuning-unet3d-$GPU.db \
        --format csv > $W/tune-unet3d.csv'
    step memory-unet3d 120 'tracker experiment memory unet3d --vary input_size=64,128,192 --batches 1,4 \
        --backend events --repeat 1 --db $W/memory-$GPU.db --format csv > $W/memory-unet3d.csv'
    step memory-unet2d 60 'tracker experiment memory unet2d --vary input_size=256,1024 --batches 16 \
        --backend events --repeat 1 --db $W/memory-$GPU.db --format csv > $W/memory-unet2d.csv'
    step whatifs-unet2d 60 'tracker experiment batch unet2d --vary conv_type=standard,pointwise \
        --vary second_stride=1,2 --batches 1,16 --backend events --repeat 3 --db $W/whatifs-$GPU.db \
        --format csv > $W/whatifs-unet2d.csv'
}

stage11() {
    # Issue 47: CUPTI's range profiler against ncu on one workload, AlexNet at batch 128, one counted
    # iteration: each whole command's wall time (this summary's seconds: the ratios), the agreement
    # launch by launch (`tracker agree`), ncu's own run to run beside it, and the library arm the same.
    export DB="$w/collectors-$GPU.db"
    step cupti-b128 200 'tracker profile alexnet --batch 128 --backend cupti --repeat 1 --db $DB \
        && newest_run $DB > $W/cupti-b128.run'
    step ncu-b128 240 'tracker profile alexnet --batch 128 --backend ncu --repeat 1 --db $DB \
        && newest_run $DB > $W/ncu-b128.run'
    step agree-b128 30 'a=$(cat $W/ncu-b128.run) && b=$(cat $W/cupti-b128.run) && tracker agree $a $b --db $DB \
        > $W/agree-b128.txt && tracker agree $a $b --db $DB --format csv > $W/agree-b128.csv \
        && head -n 1 $W/agree-b128.txt > $W/agree-b128.key'
    step ncu-full-b128 240 'ncu_full 128'
    step torch-cupti-b128 200 'tracker profile alexnet --batch 128 --impl torch --backend cupti --repeat 1 --db $DB'
    step torch-cupti-b16 120 'tracker profile alexnet --batch 16 --impl torch --backend cupti --repeat 1 --db $DB \
        && newest_run $DB > $W/torch-cupti-b16.run'
    step torch-ncu-b16 240 'tracker profile alexnet --batch 16 --impl torch --backend ncu --repeat 1 --db $DB \
        && newest_run $DB > $W/torch-ncu-b16.run'
    step torch-agree-b16 30 'a=$(cat $W/torch-ncu-b16.run) && b=$(cat $W/torch-cupti-b16.run) && tracker agree $a $b \
        --db $DB > $W/torch-agree-b16.txt && head -n 1 $W/torch-agree-b16.txt > $W/torch-agree-b16.key'
    # issue 47's second target: resnet18 at batch 32 through --torch in <= 60 s (ncu took about 11
    # minutes at batch 4 on an H100: not rerun here)
    step resnet18-cupti 120 'PYTHONPATH=tests tracker profile --torch torch_models:resnet18 --backend cupti --repeat 1 \
        --db $DB'
}

stagesuite() {
    # The files by name: `pytest -m gpu` alone collects every test module, and some import packages
    # this machine lacks (nbformat), which stops the whole session at collection.
    # The tests left when the stage's time nears its end are skipped (tests/suite_plugin.py), so
    # pytest prints its summary; each test's time and any failure are in the log as it ends.
    # Serially the suite took about 12 minutes on an H200 (tests/data/gpu-2026-11-26e-h200): ~100 s
    # compiling kernels one at a time, ~250 s under ncu and CUPTI, the rest in child processes that
    # mostly wait. So: the kernels compiled first, one process per core; then the tests that need
    # no counters on TRACKER_SUITE_WORKERS xdist workers; then the `counters` tests, one at a time
    # (two counter collections on one GPU at once fail or count each other's kernels).
    export TRACKER_SUITE_DEADLINE=$(($(date +%s) + deadline - SECONDS - 100))
    step warm 120 'python3 tools/gpu_warm.py'  # a failure stops nothing: the tests compile what it did not
    local workers="-n ${TRACKER_SUITE_WORKERS:-6}"
    python3 -c 'import xdist' 2>/dev/null || { note "  (pytest-xdist missing: the suite runs serially)"; workers=""; }
    # TRACKER_SUITE_K: only the tests pytest's -k selects (a rerun of what failed)
    export SUITE_ARGS="-v -rfEs --durations=0 tests/test_gpu*.py" WORKERS="$workers"
    step suite 540 'python3 -m pytest -m "gpu and not counters" $WORKERS ${TRACKER_SUITE_K:+-k "$TRACKER_SUITE_K"} $SUITE_ARGS'
    step suite-counters 540 'python3 -m pytest -m "gpu and counters" ${TRACKER_SUITE_K:+-k "$TRACKER_SUITE_K"} $SUITE_ARGS'
}

"stage$stage"
note "stage $stage done: $(grep -c ' rc=0 ' "$summary") steps ok of $(grep -c ' rc=' "$summary")"
