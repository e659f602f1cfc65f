#!/usr/bin/env bash
# Fault injection for libfsdp's tools (issue #13). Runs each fault TRIALS
# times against build/bin's fsdp-run, fsdp-train and fsdp-ckpt and prints,
# per fault, how many trials ended as they must: with a clear error (or, for
# kill-during-save, a run dir whose checkpoints all verify and resume),
# within the configured timeout plus 5 s, and with no C++ backtrace. A trial
# still running past that bound is a hang: it is killed and counted.
#
#   tests/faults/run.sh                  # TRIALS=5, FAULT_TIMEOUT=6 s
#   TRIALS=20 tests/faults/run.sh dead-rank hung-rank
#   FAULT_KEEP=1 tests/faults/run.sh missing-node   # keep every log
#
# Not part of `make test` (a few minutes of wall time on purpose); the
# deterministic cases it covers each have a test there. docs/reliability.md
# records its results.
set -uo pipefail
cd "$(dirname "$0")/../.."

bin=${BUILD_DIR:-build}/bin
trials=${TRIALS:-5}
timeout_s=${FAULT_TIMEOUT:-6}
grace_s=5
bound_s=$((timeout_s + grace_s))  # the goal: every fault ends within this
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-faults-XXXXXX")
# FAULT_KEEP=1 keeps the logs of every trial (the path is printed).
trap 'pkill -KILL -f "$work" 2>/dev/null; if [[ -n ${FAULT_KEEP:-} ]]; then echo "faults: logs in $work" >&2; else rm -rf "$work"; fi' EXIT
tiny=(--layers 2 --width 32 --heads 2 --context 32 --batch 8 --eval-batches 1
      --sample-bytes 0 --eval-every 0 --warmup 2 --quiet)

for tool in fsdp-run fsdp-train fsdp-ckpt; do
  [[ -x $bin/$tool ]] || { echo "faults: $bin/$tool is missing; build first (make)" >&2; exit 2; }
done

declare -A ok hung wrong worst
record() {  # record FAULT VERDICT SECONDS
  local f=$1 v=$2 s=$3
  case $v in ok) ok[$f]=$((${ok[$f]:-0} + 1)) ;; hung) hung[$f]=$((${hung[$f]:-0} + 1)) ;;
    *) wrong[$f]=$((${wrong[$f]:-0} + 1)); echo "  $f: $v" >&2 ;; esac
  if ((s > ${worst[$f]:-0})); then worst[$f]=$s; fi
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%d", b - a + 0.999 }'; }

# wait_job PID LIMIT: waits up to LIMIT s for a job of this shell and sets
# $job_code to its exit code, or to "hung" (having killed its process group).
# Not called in $(...): a subshell cannot wait for our jobs.
wait_job() {
  local pid=$1 limit=$2 start
  start=$(now)
  while kill -0 "$pid" 2>/dev/null; do
    if (($(elapsed "$start") > limit)); then
      kill -KILL -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      job_code=hung
      return
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null  # (bash would report a job killed by a signal)
  job_code=$?
}

# worker_pid LAUNCHER_PID RANK: the pid of fsdp-run's worker of that rank.
worker_pid() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do
    # (a captured string, not a pipe into grep -q: see install_check.sh's
    # [Note: no `grep -q` behind a pipe])
    if grep -qx "RANK=$2" <<<"$(tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null)"; then
      echo "$child"
      return
    fi
  done
}

has_worker() { [[ -n $(worker_pid "$1" "$2") ]]; }

wait_for() {  # wait_for SECONDS CMD...: polls CMD until it succeeds
  local deadline=$(($(date +%s) + $1))
  shift
  until "$@"; do
    (($(date +%s) > deadline)) && return 1
    sleep 0.05
  done
}

steps_logged() { [[ -f $1/metrics.jsonl ]] && (($(wc -l <"$1/metrics.jsonl") >= $2)); }

# verdict FAULT CODE LOG SECONDS PATTERN: ok if it failed, said PATTERN, and
# printed no backtrace.
verdict() {
  local f=$1 code=$2 log=$3 s=$4 pattern=$5
  if [[ $code == hung ]]; then record "$f" hung "$s"
  elif [[ $code == 0 ]]; then record "$f" "exit 0 after the fault (log: $log)" "$s"
  elif grep -q "frame #" "$log"; then record "$f" "printed a C++ backtrace ($log)" "$s"
  elif ! grep -q -- "$pattern" "$log"; then record "$f" "no '$pattern' in $log" "$s"
  elif ((s > bound_s)); then record "$f" "took ${s}s > ${bound_s}s" "$s"
  else record "$f" ok "$s"; fi
}

# launch DIR ARGS...: fsdp-run 2 ranks of fsdp-train in its own group; its
# pid in $launched (not echoed: a job started in $(...) is not ours to wait).
launch() {
  local dir=$1
  shift
  setsid "$bin/fsdp-run" --standalone --nproc-per-node 2 --timeout "$timeout_s" "$@" -- \
    "$bin/fsdp-train" "${tiny[@]}" --steps 100000 --run-dir "$dir" >"$dir.log" 2>&1 &
  launched=$!
}

fault_dead_rank() {
  local d=$work/dead-$1 pid start
  launch "$d"
  pid=$launched
  wait_for 60 steps_logged "$d" 3
  start=$(now)
  kill -KILL "$(worker_pid "$pid" 1)"
  wait_job "$pid" 60
  verdict dead-rank "$job_code" "$d.log" "$(elapsed "$start")" "rank 1 (pid"
}

# SIGSTOP rank 1 at a moment: 0 = as soon as it exists (rendezvous),
# 1 = one second in (building), 2 = after 3 logged steps (training).
fault_hung_rank() {
  local moment=$2 d=$work/hung-$1-$2 pid victim start
  launch "$d"
  pid=$launched
  wait_for 30 has_worker "$pid" 1
  if ((moment == 1)); then sleep 1; fi
  if ((moment == 2)); then wait_for 60 steps_logged "$d" 3; fi
  victim=$(worker_pid "$pid" 1)
  start=$(now)
  kill -STOP "$victim"
  wait_job "$pid" 60
  verdict "hung-rank@$moment" "$job_code" "$d.log" "$(elapsed "$start")" \
    "has been stopped by a signal"
}

listening() { [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

# Without a launcher (torchrun's way): rank 0 stopped the moment its
# rendezvous store starts listening, the outside tester's hang; rank 1 must
# fail within the timeout, naming the rendezvous.
fault_hung_rank0_no_launcher() {
  local d=$work/nolaunch-$1 port r0 r1 start
  port=$((20000 + RANDOM % 20000))
  mkdir -p "$d"
  train_rank() {
    RANK=$1 WORLD_SIZE=2 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port FSDP_COMM_TIMEOUT=$timeout_s exec setsid "$bin/fsdp-train" "${tiny[@]}" \
      --steps 100000 --run-dir "$d/run" >"$d/rank$1.log" 2>&1
  }
  train_rank 0 &
  r0=$!
  wait_for 30 listening "$port"
  kill -STOP "$r0"
  train_rank 1 &
  r1=$!
  start=$(now)
  wait_job "$r1" 60
  verdict hung-rank0-no-launcher "$job_code" "$d/rank1.log" "$(elapsed "$start")" \
    "rendezvous"
  kill -KILL "$r0" 2>/dev/null
  wait "$r0" 2>/dev/null
}

fault_missing_node() {
  local d=$work/node-$1 pid start
  mkdir -p "$d"
  start=$(now)
  setsid "$bin/fsdp-run" --nnodes 2 --node-rank 0 --nproc-per-node 1 --timeout "$timeout_s" \
    --master-port $((20000 + RANDOM % 20000)) -- "$bin/fsdp-train" "${tiny[@]}" --steps 10 \
    --run-dir "$d/run" >"$d.log" 2>&1 &
  pid=$!
  wait_job "$pid" 60
  verdict missing-node "$job_code" "$d.log" "$(elapsed "$start")" "node_rank 1"
}

fault_launcher_signal() {
  local signal=$2 d=$work/signal-$1-$2 pid workers start code
  launch "$d"
  pid=$launched
  wait_for 60 steps_logged "$d" 3
  workers="$(worker_pid "$pid" 0) $(worker_pid "$pid" 1)"
  start=$(now)
  kill "-$signal" "$pid"
  wait_job "$pid" 60
  code=$job_code
  sleep 0.5
  local left=0 w
  for w in $workers; do kill -0 "$w" 2>/dev/null && left=$((left + 1)); done
  if ((left > 0)); then record "launcher-$signal" "$left worker(s) outlived fsdp-run" 0
  else verdict "launcher-$signal" "$code" "$d.log" "$(elapsed "$start")" "got SIG$signal"; fi
}

# SIGKILL fsdp-train at a random moment while it saves every step; every
# committed checkpoint must verify, and the run must resume from its dir.
fault_kill_during_save() {
  local d=$work/save-$1 pid start code
  mkdir -p "$d"
  setsid "$bin/fsdp-train" "${tiny[@]}" --steps 100000 --save-every 1 --run-dir "$d/run" \
    >"$d.log" 2>&1 &
  pid=$!
  wait_for 60 steps_logged "$d/run" 2
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kill -KILL -- "-$pid"
  wait "$pid" 2>/dev/null
  start=$(now)
  if ! "$bin/fsdp-ckpt" verify "$d/run" >"$d.verify" 2>&1; then
    record kill-during-save "a committed checkpoint failed verify ($d.verify)" 0
    return
  fi
  committed=$((committed + $(grep -c '^OK:' "$d.verify")))
  local step
  step=$(grep -c . "$d/run/metrics.jsonl")
  "$bin/fsdp-train" --resume "$d/run" --run-dir "$d/run" --steps $((step + 2)) --quiet \
    --sample-bytes 0 --eval-batches 1 >"$d.resume" 2>&1
  code=$?
  if [[ $code == 0 ]] && grep -q "resume    " "$d.resume"; then
    record kill-during-save ok "$(elapsed "$start")"
  else
    record kill-during-save "resume from the run dir failed with $code ($d.resume)" 0
  fi
}

# The bad input the outside tester tried, each with what its error must say.
bad_inputs=(
  "does not fit in a 64-bit integer|fsdp-train --steps 99999999999999999999"
  "does not fit in a 64-bit integer|fsdp-train --layers 99999999999999999999"
  "the model does not fit|fsdp-train --layers 99999999"
  "the model does not fit|fsdp-train --width 65536"
  "--timeout is -1|fsdp-train --timeout -1"
  "data file '/nonexistent' does not exist|fsdp-train --data /nonexistent"
  "not in range 1 to 1048576|fsdp-ckpt reshard /nonexistent --world-size 0 --out /tmp/x"
  "--timeout must be a number of seconds|fsdp-run --timeout 0 -- true"
  "--nproc-per-node must be a whole number|fsdp-run --nproc-per-node 0 -- true"
)
fault_bad_inputs() {
  local i=0 entry pattern cmd log start code
  for entry in "${bad_inputs[@]}"; do
    pattern=${entry%%|*}
    cmd=${entry#*|}
    log=$work/bad-$1-$i.log
    i=$((i + 1))
    start=$(now)
    # shellcheck disable=SC2086  # word splitting of the command is wanted
    code=$(timeout 60 "$bin"/$cmd >"$log" 2>&1; echo $?)
    [[ $code == 124 ]] && code=hung
    verdict "bad-input" "$code" "$log" "$(elapsed "$start")" "$pattern"
  done
}

all=(dead-rank hung-rank hung-rank0-no-launcher missing-node launcher-signal kill-during-save bad-inputs)
selected=("$@")
((${#selected[@]})) || selected=("${all[@]}")
committed=0
for fault in "${selected[@]}"; do
  echo "faults: $fault x $trials" >&2
  for ((t = 1; t <= trials; t++)); do
    case $fault in
      hung-rank) for m in 0 1 2; do fault_hung_rank "$t" "$m"; done ;;
      launcher-signal) for s in TERM INT HUP; do fault_launcher_signal "$t" "$s"; done ;;
      bad-inputs) fault_bad_inputs "$t" ;;
      *) "fault_${fault//-/_}" "$t" ;;
    esac
  done
done

printf '\n%-26s %6s %6s %6s %9s\n' fault ok hung wrong "max s"
for f in $(printf '%s\n' "${!ok[@]}" "${!hung[@]}" "${!wrong[@]}" | sort -u); do
  printf '%-26s %6d %6d %6d %9d\n' "$f" "${ok[$f]:-0}" "${hung[$f]:-0}" "${wrong[$f]:-0}" \
    "${worst[$f]:-0}"
done
echo "(bound: --timeout ${timeout_s} s + ${grace_s} s; kill-during-save: $committed committed checkpoints verified)"
bad=0
for f in "${!hung[@]}" "${!wrong[@]}"; do bad=1; done
exit $bad
