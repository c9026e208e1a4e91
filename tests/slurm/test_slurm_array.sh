#!/usr/bin/env bash
# The README's Slurm job array ("Beyond one machine"), end to end: a one-node Slurm cluster started on
# localhost in a private temp dir (its own munged, slurmctld and slurmd; SLURM_CONF points the clients at it,
# nothing under /etc is read or written), `vramsim plan --shard K/N` and `vramsim sweep --shard K/N` submitted
# as `sbatch --wait --array`, and `vramsim merge` of the parts compared byte for byte with the same command on
# one machine (text, --json, --csv).
# Without root, munge or Slurm, or when the cluster does not come up, it exits 77: CTest reports it as skipped.
#
#     test_slurm_array.sh PATH/TO/vramsim
set -euo pipefail

skip() { echo "SKIPPED slurm.array: $*"; exit 77; }
fail() { echo "FAILED slurm.array: $*"; exit 1; }

[[ $# -eq 1 && -x $1 ]] || fail "usage: test_slurm_array.sh PATH/TO/vramsim"
vramsim=$(realpath "$1")
[[ $(id -u) -eq 0 ]] || skip "not root (the test's own munged and slurmd run as root)"
for b in munged slurmctld slurmd sinfo squeue sbatch scancel; do
  command -v "$b" >/dev/null || skip "$b not found (apt-get install slurm-wlm munge)"
done

tmp=$(mktemp -d)
pids=()
cleanup() {
  # A job still running when the test stops (a failure, the timeout) is cancelled first: its slurmstepd
  # outlives a stopped slurmd.
  # SLURM_CONF is named again here: never a real cluster's jobs.
  if [[ -S $tmp/munge.socket ]] && [[ -f $tmp/slurm.conf ]]; then
    SLURM_CONF=$tmp/slurm.conf timeout 10 scancel --quiet --full --user=root 2>/dev/null || true
    for _ in {1..20}; do
      [[ -z $(SLURM_CONF=$tmp/slurm.conf timeout 5 squeue -h 2>/dev/null) ]] && break
      sleep 0.5
    done
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  cd /
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "FAILED slurm.array: interrupted"; exit 1' INT TERM
on_failure() {
  local f
  for f in "$tmp"/*.err "$tmp"/slurm-*.out; do  # the daemons run with -D: stderr has their log
    if [[ -f $f ]]; then echo "--- $f"; tail -15 "$f"; fi
  done
}

# Two TCP ports nothing listens on (the usual 6817/6818 may belong to a real cluster on this machine).
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    if ! (: <>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
[[ $slurmd_port != "$ctld_port" ]] || slurmd_port=$((ctld_port + 1))

# munged refuses a key readable by others (1 KiB of random bytes is what mungekey writes), and without --force
# a socket in a directory others cannot enter (mktemp -d's 0700).
head -c 1024 /dev/urandom >"$tmp/munge.key"
chmod 400 "$tmp/munge.key"
munged --foreground --force --socket="$tmp/munge.socket" --key-file="$tmp/munge.key" \
  --pid-file="$tmp/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed" \
  2>"$tmp/munged.err" &
pids+=($!)

# The node as slurmd detects it (a node configured with more CPUs than it has is drained), memory kept small
# (RealMemory is only checked against, never reserved).
node=$(slurmd -C 2>/dev/null | head -1 | sed 's/RealMemory=[0-9]*/RealMemory=1000/') || true
[[ $node == NodeName=* ]] || skip "slurmd -C does not describe this machine"
name=$(sed 's/^NodeName=\([^ ]*\).*/\1/' <<<"$node")
mkdir -p "$tmp/state" "$tmp/spool"
: >"$tmp/plugstack.conf"
# sbatch --wait polls the job after 2, 8, then every 32 s, but never more than MinJobAge/2 apart (so a finished
# job is not purged unseen): MinJobAge=4 keeps it at 2 s, where the default 300 added up to 30 s to the array.
cat >"$tmp/slurm.conf" <<EOF
ClusterName=vramsimtest
SlurmctldHost=$name(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
PlugStackConfig=$tmp/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge=4
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf

for _ in {1..50}; do [[ -S $tmp/munge.socket ]] && break; sleep 0.1; done
[[ -S $tmp/munge.socket ]] || { on_failure; skip "munged did not start"; }
slurmctld -D 2>"$tmp/slurmctld.err" &
pids+=($!)
slurmd -D -N "$name" 2>"$tmp/slurmd.err" &
pids+=($!)
state=
for _ in {1..60}; do
  state=$(timeout 5 sinfo -h -n "$name" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { on_failure; skip "a Slurm daemon exited (logs above)"; }; done
  sleep 0.5
done
[[ $state == idle ]] || { on_failure; skip "the one-node cluster did not come up (node state '${state}')"; }

# Runs `vramsim NAME ARGS...` on one machine (text, --json, --csv) and as `sbatch --wait --array=1-SHARDS` with
# --shard K/SHARDS (EXTRA appended to each task's command), merges the parts and compares the three outputs
# byte for byte.
array_equals_one_machine() {
  local name=$1 shards=$2 extra=$3
  shift 3
  "$vramsim" "$@" >"single_$name.txt"
  "$vramsim" "$@" --json --csv "single_$name.csv" >"single_$name.json"
  local start=$SECONDS rc=0
  # The README's command. In the background, so that Ctrl-C or a SIGTERM reaches the trap at once (a foreground
  # sbatch --wait would hold it until the array ends).
  timeout 300 sbatch --wait --quiet --array=1-"$shards" --cpus-per-task=1 --wrap \
    "'$vramsim' $* $extra --shard \${SLURM_ARRAY_TASK_ID}/$shards > ${name}_\${SLURM_ARRAY_TASK_ID}.json" &
  pids+=($!)
  wait $! || rc=$?
  ((rc == 0)) || { on_failure; fail "sbatch --wait --array=1-$shards ($name) failed (exit $rc)"; }
  echo "$name: job array of $shards shards ran in $((SECONDS - start)) s"
  local parts=() k f
  for ((k = 1; k <= shards; k++)); do parts+=("${name}_$k.json"); done
  "$vramsim" merge "${parts[@]}" >"merged_$name.txt"
  "$vramsim" merge --json --csv "merged_$name.csv" "${parts[@]}" >"merged_$name.json"
  for f in txt json csv; do
    cmp "single_$name.$f" "merged_$name.$f" || fail "the merged $name job array's $f differs from one machine"
  done
}

cd "$tmp"
# GPT-2 large on a 4090 (the README's example at half the batch): 46 predicted and 5 skipped in about 4 s.
array_equals_one_machine plan 4 "--threads \${SLURM_CPUS_PER_TASK}" \
  plan --model gpt2-large --gpu 4090 --global-batch 8 --seq 1024
# A sweep cut by policy the same way: five policies over three array tasks.
array_equals_one_machine sweep 3 "" \
  sweep --model gpt2 --capacity 8GiB --seq uniform:64..192 --batch 2 --steps 4 \
  --policies pytorch,pytorch-expandable,no-cache,buddy,offline-optimal
echo "PASSED slurm.array: plan in 4 array tasks, sweep in 3, merged = one machine" \
  "(text, --json, --csv; $(wc -l <single_plan.csv) and $(wc -l <single_sweep.csv) CSV lines)"
