#!/usr/bin/env bash
# scripts/plan-array.sbatch end to end on a one-node Slurm started here: a tiny layout search
# submitted as a job array of 3 shards, the merge as a job that depends on it, and the merged
# plan (JSON and table) compared with the unsharded `comptrain plan`.
#
# The Slurm (Debian's slurm-wlm, scripts/setup.sh) is private to the test: its slurm.conf, state and
# spool directories in a temporary directory (SLURM_CONF), no authentication (auth/none,
# cred/none: nothing but this machine can reach it), slurmctld and slurmd bound to 127.0.0.1 on
# two free ports found at random in 20000-29999. The daemons and any job left are stopped and the
# directory removed on every exit. Where the daemons cannot run (not root, slurm-wlm missing, a
# container that refuses them) it prints "SKIPPED: why" and exits 77, which ctest reports as
# skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt).
# Usage: slurm_plan_array_test.sh PATH/TO/comptrain REPOSITORY-ROOT
set -u
bin=$(realpath "$1")
root=$(realpath "$2")
skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  for f in "$work"/log/*.log "$work"/run/*.out; do
    [[ -s $f ]] && { echo "--- $f"; tail -15 "$f"; }
  done
  exit 1
}

# A test run inside a Slurm job must not talk to that job's cluster.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^SLURM_')
[[ $(id -u) == 0 ]] || skip "slurmd runs jobs as their user and needs root here (uid $(id -u))"
for p in slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
  command -v "$p" >/dev/null || skip "$p not found (Debian's slurm-wlm; scripts/setup.sh installs it)"
done

work=$(mktemp -d /tmp/comptrain-slurm-test.XXXXXX)
pids=()
cleanup() {
  if ((${#pids[@]})); then
    scancel --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null
    for _ in $(seq 20); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
    kill "${pids[@]}" 2>/dev/null
    for _ in $(seq 20); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.5; done
    kill -9 "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir -p "$work/state" "$work/spool" "$work/log" "$work/run"

# Two free ports (slurmctld, slurmd) on 127.0.0.1.
port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
for _ in $(seq 50); do
  ctld_port=$((20000 + RANDOM % 5000 * 2))
  slurmd_port=$((ctld_port + 1))
  port_free "$ctld_port" && port_free "$slurmd_port" && break
done

# SlurmctldHost and the node are "localhost" at 127.0.0.1, and NoCtldInAddrAny/NoInAddrAny bind the
# daemons to that address rather than to every interface. sched_interval=1: dependencies are
# resolved within a second or so rather than the default minute.
cat >"$work/slurm.conf" <<CONF
ClusterName=comptraintest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf

slurmctld -D -f "$SLURM_CONF" >"$work/run/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$work/run/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && break
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || skip "a Slurm daemon exited at start: $(tail -3 "$work"/run/*.out "$work"/log/*.log 2>/dev/null | tr '\n' ' ' | cut -c1-400)"
  done
  sleep 0.5
done
[[ $(sinfo -h -o %T 2>/dev/null) == idle ]] || skip "the Slurm node did not become idle in 30 s: $(sinfo -h 2>&1 | head -2 | tr '\n' ' ')"
if ss -Htln 2>/dev/null | grep -E ":($ctld_port|$slurmd_port)\b" | grep -vq '127\.0\.0\.1:'; then
  fail "a Slurm daemon listens beyond 127.0.0.1: $(ss -Htln | grep -E ":($ctld_port|$slurmd_port)\b")"
fi

# The shipped small layout search: a 4-layer GPT on 8 H100s, tensor 1, 2 and 3 (3 left out: a
# note in every shard) x pipeline 1 and 2: 4 configurations over 3 shards (2, 1 and 1).
cp "$root/scenarios/gpt-layout-plan-8xh100.yaml" "$work/search.yaml" || fail "no scenarios/gpt-layout-plan-8xh100.yaml"

cd "$work" || fail "cd $work"
export COMPTRAIN=$bin JOBS=1
array=$(sbatch --parsable --array=0-2 --output="$work/run/plan-%a.out" "$root/scripts/plan-array.sbatch" search.yaml shards) || fail "sbatch of the array"
merge=$(sbatch --parsable --dependency=afterok:"$array" --output="$work/run/merge.out" "$root/scripts/plan-array.sbatch" --merge shards) || fail "sbatch of the merge"
# The unsharded plan, meanwhile (the jobs queue behind it on a small machine, which is fine).
"$bin" plan -q -j 1 search.yaml >whole.txt || fail "the unsharded plan"
"$bin" plan -q -j 1 --json search.yaml >whole.json || fail "the unsharded plan --json"

deadline=$((SECONDS + 120))
while [[ -n $(squeue -h 2>/dev/null) ]]; do
  ((SECONDS < deadline)) || fail "the jobs did not finish in 120 s: $(squeue 2>&1 | tr '\n' ' ')"
  sleep 1
done
for id in "${array}_0" "${array}_1" "${array}_2" "$merge"; do
  state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1)
  [[ $state == JobState=COMPLETED ]] || fail "job $id: ${state:-not found}; expected JobState=COMPLETED"
done

passed=0
for i in 0 1 2; do
  [[ -s shards/shard-$i.json ]] || fail "no shards/shard-$i.json"
  grep -q '"name": "comptrain.plan_shard"' "shards/shard-$i.json" || fail "shards/shard-$i.json is not a plan shard"
  passed=$((passed + 1))
done
cmp -s whole.json shards/plan.json || fail "the merged JSON differs from the unsharded plan's: $(diff whole.json shards/plan.json | head -20)"
passed=$((passed + 1))
cmp -s whole.txt shards/plan.txt || fail "the merged table differs from the unsharded plan's: $(diff whole.txt shards/plan.txt | head -20)"
passed=$((passed + 1))
grep -q '^Fastest: ' shards/plan.txt || fail "the merged table has no Fastest line"
passed=$((passed + 1))
echo "passed $passed checks: 3 array tasks and the dependent merge ran on Slurm; the merged plan equals the unsharded one"
