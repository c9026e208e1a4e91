#!/bin/bash
# Replay time and peak memory on generated ~100 MB and ~1 GB snapshots, against reading the same bytes
# (bench/RESULTS.md, "Large snapshots"). Needs a built ./build/sim/vramsim, /usr/bin/python3 and /usr/bin/time;
# writes about 1.2 GB under $DIR (default /tmp/vramsim_large).
#
#   bench/measure_large_snapshots.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/vramsim_large}
VRAMSIM=./build/sim/vramsim
mkdir -p "$DIR"

# 1,039,477 allocator events: 100 steps of Llama-2-7B at batch 1 x 512 (a closed-world trace, no final state).
if [ ! -f "$DIR/events.pickle" ]; then
  "$VRAMSIM" predict --model llama-2-7b --gpu h100 --batch 1 --seq 512 --steps 100 \
    --trace-out "$DIR/events.pickle" > /dev/null
fi
# 400,000 entries x 36 frames (~100 MB) and 1,000,000 entries x 186 frames (~1 GB).
[ -f "$DIR/snapshot_100mb.pickle" ] || /usr/bin/python3 bench/make_large_snapshot.py "$DIR/events.pickle" \
  "$DIR/snapshot_100mb.pickle" --entries 400000 --frames 36
[ -f "$DIR/snapshot_1gb.pickle" ] || /usr/bin/python3 bench/make_large_snapshot.py "$DIR/events.pickle" \
  "$DIR/snapshot_1gb.pickle" --entries 1000000 --frames 186

echo "| file | bytes | read (cat, page cache) | vramsim replay, wall | replay / read | peak RSS | RSS / file |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for f in "$DIR/snapshot_100mb.pickle" "$DIR/snapshot_1gb.pickle"; do
  bytes=$(stat -c %s "$f")
  cat "$f" > /dev/null  # warm the page cache: both commands read the same cached bytes
  read_s=$( { /usr/bin/time -f "%e" cat "$f" > /dev/null; } 2>&1 )
  out=$( { /usr/bin/time -f "%e %M" "$VRAMSIM" replay "$f" > /dev/null; } 2>&1 )
  wall=${out% *}
  rss_kb=${out#* }
  python3 - "$f" "$bytes" "$read_s" "$wall" "$rss_kb" <<'EOF'
import os, sys
name, size, read_s, wall, rss_kb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
ratio = f"{wall / read_s:.0f}x" if read_s > 0 else "n/a (read < 10 ms)"
print(f"| {os.path.basename(name)} | {size:,} | {read_s:.2f} s | {wall:.2f} s | {ratio} | {rss_kb / 1024:,.0f} MiB"
      f" | {rss_kb * 1024 / size:.2f} |")
EOF
done
