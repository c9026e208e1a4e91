#!/usr/bin/env bash
# Hardware validation of vramsim in one run: build, record real training steps with PyTorch, predict them with
# vramsim, replay the predicted traces through PyTorch's allocator and on the device, compare, and write
# OUT/validation.md plus every raw file. Designed for one H200 with 16 cores in under 8 minutes (the "quick"
# grid); see kernels/README.md.
#
# Usage: kernels/validate_on_gpu.sh [--dry-run] [--grid quick|full|smoke] [--build-dir DIR] [--no-build]
#                                   [--jobs N] [--gpu NAME] [OUT]
#   OUT          output folder (default: $OUT, else ./validation-out)
#   --dry-run    no GPU needed: builds with SIM_WITH_CUDA=AUTO and runs every step that needs none (vramsim
#                predict, the Python scripts' --dry-run, vramsim-replay's FAKE backends); the table says
#                "not measured (no GPU)" where a GPU would have measured
#   --no-build   use the binaries already in --build-dir (default: build-validate/ in the repository)
#   --gpu NAME   vramsim predict --gpu (default: the probed device's name, else H200)
#
# Steps (each logged under OUT/logs/, timed in OUT/timings.txt):
#   build        cmake -DSIM_WITH_CUDA=ON (AUTO for --dry-run); vramsim, vramsim-replay, vramsim-gpu-probe
#   probe        vramsim-gpu-probe --json > OUT/probe.json                                  (GPU)
#   record       traces/recorders/record_training_steps.py -> OUT/recorded/<config>/ (GPU; only the plan files
#                in a dry run)
#   predict      each OUT/recorded/<config>/predict_command.txt -> predict.json, predicted.vtrace
#   check-rec    vramsim replay --check --json of each recorded snapshot -> replay_check.json   (GPU runs only)
#   hw-replay    vramsim-replay --json on every predicted.vtrace and traces/samples/*.pickle, backends
#                cuda-malloc, async-pool, model, model-expandable (fake, fake-model, fake-model-expandable in a
#                dry run) -> OUT/hw/<trace>.<backend>.json
#   torch-replay traces/recorders/replay_through_pytorch.py on each predicted.vtrace (default and expandable
#                segments, --dry-run without a GPU), then vramsim replay --check --json of each snapshot
#   compare      traces/recorders/compare_results.py OUT -> OUT/validation.md
# GPU steps run one at a time: device memory is measured device-wide, so nothing else may use the GPU.
# Exit status: 0 when every step succeeded, 1 when some failed (the table is written anyway), 2 when the build
# failed, 64 on bad arguments.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1  # keep the source tree clean of __pycache__

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY=0
GRID=quick
BUILD_DIR="$ROOT/build-validate"
NO_BUILD=0
JOBS=$(nproc 2>/dev/null || echo 2)
GPU_NAME=""
OUT_DIR="${OUT:-}"

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --grid) GRID=${2:?--grid needs a value}; shift ;;
    --build-dir) BUILD_DIR=${2:?--build-dir needs a value}; shift ;;
    --no-build) NO_BUILD=1 ;;
    --jobs) JOBS=${2:?--jobs needs a value}; shift ;;
    --gpu) GPU_NAME=${2:?--gpu needs a value}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "validate_on_gpu.sh: unknown option $1" >&2; exit 64 ;;
    *) OUT_DIR=$1 ;;
  esac
  shift
done
case "$GRID" in
  quick|full|smoke) ;;
  *) echo "validate_on_gpu.sh: --grid: quick, full or smoke" >&2; exit 64 ;;
esac
OUT_DIR=${OUT_DIR:-$PWD/validation-out}
mkdir -p "$OUT_DIR/logs" "$OUT_DIR/hw" "$OUT_DIR/recorded" || exit 64
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD_DIR=$(mkdir -p "$BUILD_DIR" && cd "$BUILD_DIR" && pwd)
: > "$OUT_DIR/timings.txt"
FAILED=()
T_START=$(date +%s.%N)

seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN { print b - a }'; }

# step NAME CMD...: runs CMD with its output in logs/NAME.log, records its time and any failure.
step() {
  local name=$1; shift
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" > "$OUT_DIR/logs/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%-14s %7.1f s  exit %d\n' "$name" "$(seconds_between "$t0" "$t1")" "$rc" | tee -a "$OUT_DIR/timings.txt"
  if [ "$rc" -ne 0 ]; then FAILED+=("$name (exit $rc, see logs/$name.log)"); fi
  return "$rc"
}

VRAMSIM="$BUILD_DIR/sim/vramsim"
REPLAY="$BUILD_DIR/kernels/vramsim-replay"
PROBE="$BUILD_DIR/kernels/vramsim-gpu-probe"
RECORDERS="$ROOT/traces/recorders"

do_build() {
  local cuda=ON targets=(vramsim vramsim-replay vramsim-gpu-probe)
  if [ "$DRY" = 1 ]; then cuda=AUTO; targets=(vramsim vramsim-replay); fi
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSIM_BUILD_TESTS=OFF -DSIM_BUILD_BENCH=OFF \
    -DSIM_WITH_CUDA=$cuda && cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
}

do_probe() { "$PROBE" --json > "$OUT_DIR/probe.json"; }

do_record() {
  local dry=()
  [ "$DRY" = 1 ] || [ "$HAVE_TORCH" = 0 ] && dry=(--dry-run)
  local grid=$GRID configs=()
  if [ "$GRID" = smoke ]; then
    grid=quick
    local smoke="gpt2_b8_s512_amp-bf16_none_math,gpt2_b8_s1024_amp-bf16_none_flash"
    smoke+=",llama-160m_b8_s1024_fp32_none_math"
    configs=(--configs "$smoke")
  fi
  python3 "$RECORDERS/record_training_steps.py" --out "$OUT_DIR/recorded" --grid "$grid" "${configs[@]}" \
    --vramsim "$VRAMSIM" --gpu "$GPU_NAME" "${dry[@]}"
}

# Runs CMD (a predict_command.txt line) and keeps its JSON; CPU only, so configurations run in parallel.
do_predict() {
  local files=("$OUT_DIR"/recorded/*/predict_command.txt)
  [ -e "${files[0]}" ] || { echo "no predict_command.txt under recorded/"; return 1; }
  printf '%s\n' "${files[@]}" | xargs -P "$JOBS" -I{} sh -c \
    'd=$(dirname "$1"); sh "$1" > "$d/predict.json" 2> "$d/predict.err" || { echo "failed: $d"; exit 1; }' _ {}
}

# vramsim replay --check exits 1 when the model differs from the recording: that is a result, not a failure.
check_one() {
  local snap=$1 out=$2
  "$VRAMSIM" replay --check --json "$snap" > "$out" 2> "${out%.json}.err"
  local rc=$?
  [ "$rc" -le 1 ] || { echo "vramsim replay --check failed ($rc) on $snap"; return 1; }
}
export -f check_one
export VRAMSIM

do_check_recordings() {
  local snaps=("$OUT_DIR"/recorded/*/snapshot.pickle)
  [ -e "${snaps[0]}" ] || { echo "no recorded snapshot.pickle"; return 1; }
  printf '%s\n' "${snaps[@]}" | xargs -P "$JOBS" -I{} bash -c \
    'check_one "$1" "$(dirname "$1")/replay_check.json"' _ {}
}

do_hw_replay() {
  local backends=(cuda-malloc async-pool model model-expandable) bad=0
  [ "$DRY" = 1 ] && backends=(fake fake-model fake-model-expandable)
  local traces=("$OUT_DIR"/recorded/*/predicted.vtrace "$ROOT"/traces/samples/*.pickle)
  for trace in "${traces[@]}"; do
    [ -e "$trace" ] || continue
    local name
    name=$(basename "$trace" .pickle)
    [ "$(basename "$trace")" = predicted.vtrace ] && name=$(basename "$(dirname "$trace")")
    for b in "${backends[@]}"; do
      local args=(--backend "${b%-expandable}" --json)
      case "$b" in *-expandable) args+=(--alloc-conf expandable_segments:True) ;; esac
      case "$b" in model*) args+=(--verify) ;; esac
      "$REPLAY" "$trace" "${args[@]}" > "$OUT_DIR/hw/$name.$b.json" 2> "$OUT_DIR/hw/$name.$b.err" || {
        echo "vramsim-replay failed: $name $b: $(head -c 300 "$OUT_DIR/hw/$name.$b.err")"; bad=1; }
      echo "$name $b done"
    done
  done
  return "$bad"
}

do_torch_replay() {
  local bad=0
  for trace in "$OUT_DIR"/recorded/*/predicted.vtrace; do
    [ -e "$trace" ] || continue
    local d
    d=$(dirname "$trace")/pytorch_replay
    if [ "$DRY" = 1 ] || [ "$HAVE_TORCH" = 0 ]; then
      python3 "$RECORDERS/replay_through_pytorch.py" "$trace" --out "$d" --dry-run || bad=1
      continue
    fi
    python3 "$RECORDERS/replay_through_pytorch.py" "$trace" --out "$d" || bad=1
    for mode in default expandable; do
      [ -e "$d/$mode/snapshot.pickle" ] && { check_one "$d/$mode/snapshot.pickle" "$d/$mode/check.json" || bad=1; }
    done
  done
  return "$bad"
}

echo "vramsim hardware validation: $([ "$DRY" = 1 ] && echo 'DRY RUN (no GPU)' || echo GPU) -> $OUT_DIR"
if [ "$NO_BUILD" = 0 ]; then
  step build do_build || { echo "validate_on_gpu.sh: the build failed (see $OUT_DIR/logs/build.log)" >&2; exit 2; }
fi
for bin in "$VRAMSIM" "$REPLAY"; do
  [ -x "$bin" ] || { echo "validate_on_gpu.sh: $bin is missing (build first, or drop --no-build)" >&2; exit 2; }
done
if [ "$DRY" = 0 ]; then
  step probe do_probe
  if [ -z "$GPU_NAME" ]; then
    GPU_NAME=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["device"]["name"])' \
      "$OUT_DIR/probe.json" 2>/dev/null || echo H200)
  fi
fi
GPU_NAME=${GPU_NAME:-H200}
HAVE_TORCH=0
python3 -c 'import torch' > /dev/null 2>&1 && HAVE_TORCH=1
if [ "$DRY" = 0 ] && [ "$HAVE_TORCH" = 0 ]; then
  # Without PyTorch the recordings cannot be made: keep going with what needs only the device.
  echo "PyTorch is not installed: recording and PyTorch replays run as dry runs" | tee "$OUT_DIR/NO_PYTORCH"
  FAILED+=("record / torch-replay: PyTorch not installed")
fi
step record do_record
step predict do_predict
[ "$DRY" = 0 ] && step check-rec do_check_recordings
step hw-replay do_hw_replay
step torch-replay do_torch_replay
step compare python3 "$RECORDERS/compare_results.py" "$OUT_DIR"
printf '%-14s %7.1f s\n' total "$(seconds_between "$T_START" "$(date +%s.%N)")" | tee -a "$OUT_DIR/timings.txt"
echo "table: $OUT_DIR/validation.md"
if [ "${#FAILED[@]}" -gt 0 ]; then
  printf 'failed: %s\n' "${FAILED[@]}" >&2
  exit 1
fi
exit 0
