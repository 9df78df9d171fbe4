#!/usr/bin/env bash
# Runs edu_stress in one or more VM configurations, judges each VM run (qemu/check-guest.sh:
# kernel reports, pins, unload, kmemleak), and prints one table of figures plus METRIC lines.
#
# usage: tests/stress/run-stress.sh [--mode short|long] [--seed N] [--known-bug LIST]
#                                   [--bin EDU_STRESS] CONFIG[:part,part...] ...
# e.g.   tests/stress/run-stress.sh --mode long debug:isolation,fuzz,kill,fault,unplug smp2:smp
# Exits 0 only when every VM run passed and every check in it passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
build=$(cd "${BUILD_DIR:-$src/build}" 2>/dev/null && pwd -P || echo "$src/build")
mode=short seed=${STRESS_SEED:-12} known= bin=$build/cmake/tests/stress/edu_stress
runs=()
while [ $# -gt 0 ]; do
	case "$1" in
	--mode) mode=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--known-bug) known=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-*) echo "run-stress: unknown option $1" >&2; exit 2 ;;
	*) runs+=("$1"); shift ;;
	esac
done
[ ${#runs[@]} -gt 0 ] || { echo "run-stress: no configuration given" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd -P)/$(basename "$bin")
[ -x "$bin" ] || { echo "run-stress: $bin is not built (make)" >&2; exit 2; }
timeout_s=$([ "$mode" = long ] && echo 3600 || echo 1200)
kpat='^\[ *[0-9]+\.[0-9]+\] (.*)?(Oops|BUG:|kernel BUG|WARNING:|refcount_t:|general protection|Kernel panic|UBSAN:|INFO: task .* blocked|INFO: (possible|inconsistent)|watchdog: BUG|ODEBUG:|DMA-API: [^ ]+ [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]: )'

declare -A sum=()
figs=(ioctls processes_killed unplugs faults_injected bytes_verified kernel_reports leaked_pins leaked_objects corrupted_bytes)
for f in "${figs[@]}" distinct_errnos; do sum[$f]=0; done
rc=0 verdicts=() wall_total=0
echo "run-stress: mode $mode, seed $seed, known bugs: ${known:-none}"
for run in "${runs[@]}"; do
	config=${run%%:*} parts=
	[ "$run" != "$config" ] && parts=${run#*:}
	out=$build/vm/runs/$config-stress_$mode
	args="--mode $mode --seed $seed${parts:+ --parts $parts}${known:+ --known-bug $known}"
	# Counter snapshots per part (an instrumented module only): the fuzzer's own coverage.
	gcov="--gcov-out /out/gcov-parts"
	echo "run-stress: $config: edu_stress $args"
	vmline=$("$src/qemu/run-vm.sh" --quiet --test-mode --config "$config" --out "$out" --timeout "$timeout_s" -- \
		"hostrun /host$bin $args $gcov" | tee /dev/stderr | grep '^VM-RESULT')
	vm=$?
	[ -n "$vmline" ] || vmline="VM-RESULT $config FAIL (no verdict; see $out)"
	log=$out/cmd.log
	# The guest's own account, as it ran.
	grep -E '^(== |FAIL|KNOWN-BUG|FIXED\?|  |fuzz:|kill:|fault:|unplug|smp:|isolation|device |edu_stress)' "$log" 2>/dev/null
	res=$(grep '^STRESS-RESULT' "$log" 2>/dev/null | tail -n1)
	[ -n "$res" ] || res="STRESS-RESULT FAIL: edu_stress did not finish (see $log)"
	echo "$res"
	echo "$vmline"
	guest() { awk -v k="$1" '$1 == "STRESS" && $2 == k { v = $3 } END { print v + 0 }' "$log" 2>/dev/null || echo 0; }
	for f in ioctls processes_killed unplugs faults_injected bytes_verified corrupted_bytes leaked_objects distinct_errnos; do
		sum[$f]=$((sum[$f] + $(guest "$f")))
	done
	# Host-side judge: the guest's dmesg and console, the pin counters after rmmod, kmemleak.
	kr=$(cat "$out/dmesg.txt" "$out/console.log" 2>/dev/null | tr -d '\r' | grep -E "$kpat" | sort -u | wc -l)
	sum[kernel_reports]=$((sum[kernel_reports] + kr))
	acq=$(sed -n 's/^pin_acquired=//p' "$out/guest-result" 2>/dev/null | tail -n1)
	rel=$(sed -n 's/^pin_released=//p' "$out/guest-result" 2>/dev/null | tail -n1)
	lp=$(guest leaked_pins)
	[ -n "$acq" ] && [ -n "$rel" ] && [ "$acq" != "$rel" ] && lp=$((lp + acq - rel))
	sum[leaked_pins]=$((sum[leaked_pins] + lp))
	if [ -s "$out/kmemleak.txt" ]; then
		lo=$(awk -f "$src/qemu/kmemleak-ours.awk" "$out/kmemleak.txt" | head -n1)
		sum[leaked_objects]=$((sum[leaked_objects] + lo))
	fi
	sum[wall_s]=$(( ${sum[wall_s]:-0} + $(cat "$out/wall_s" 2>/dev/null || echo 0) ))
	case "$res" in STRESS-RESULT\ PASS*) ;; *) rc=1 ;; esac
	[ $vm -eq 0 ] || rc=1
	verdicts+=("$config: ${vmline#VM-RESULT } / ${res#STRESS-RESULT }")
done

echo
echo "== make stress ($mode, seed $seed) =="
printf '%-26s %14s %s\n' figure value target
target() {
	case "$1:$mode" in
	ioctls:long) echo ">= 100000" ;; processes_killed:long) echo ">= 100" ;;
	unplugs:long) echo ">= 10" ;; faults_injected:long) echo ">= 1000" ;;
	kernel_reports:*|leaked_pins:*|leaked_objects:*|corrupted_bytes:*) echo "0" ;;
	*) echo "" ;;
	esac
}
for f in "${figs[@]}"; do printf '%-26s %14s %s\n' "stress_$f" "${sum[$f]}" "$(target "$f")"; done
printf '%-26s %14s\n' "distinct errnos" "${sum[distinct_errnos]}"
printf '%-26s %14s\n' "VM wall seconds" "${sum[wall_s]}"
for v in "${verdicts[@]}"; do echo "  $v"; done
for f in "${figs[@]}"; do
	unit=count
	[ "$f" = bytes_verified ] || [ "$f" = corrupted_bytes ] && unit=bytes
	[ "$f" = leaked_pins ] && unit=pages
	echo "METRIC stress_$f ${sum[$f]} $unit"
done
mkdir -p "$build/bench" && for f in "${figs[@]}"; do echo "METRIC stress_$f ${sum[$f]}"; done > "$build/bench/stress-metrics-$mode.txt"
[ "$rc" = 0 ] && echo "stress: PASS" || echo "stress: FAIL"
exit $rc
