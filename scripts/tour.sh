#!/usr/bin/env bash
# make tour: one 1 MiB buffer (registered user memory, and a driver BO) followed through the
# VM configurations where the DMA path differs: where its pages are, its SG table, the
# addresses edu is given, the pins, one copy's transfers and fence, and the pool's reuse of a
# block (edu-inspect in the guest). Under the IOMMU, QEMU's own translation trace is joined
# with the driver's IOVAs. Ends with a table comparing the configurations.
#   usage: scripts/tour.sh [--check] [CONFIG...]   (default: noiommu iommu bounce widemask highmem)
# `debug` (the debug kernel, only when named; `make kernel-debug` first) adds the DMA API's own
# record of each mapping (CONFIG_DMA_API_DEBUG's dma-api/dump) beside the driver's.
# --check: edu-inspect's consistency checks in the guest, and here what Documentation/driver.md
# predicts for each configuration; any miss fails the tour.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd -P)
build=${BUILD_DIR:-$src/build}
mkdir -p "$build" && build=$(cd "$build" && pwd -P)
check=
if [ "${1:-}" = --check ]; then check=--check; shift; fi
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(noiommu iommu bounce widemask highmem)
out=$build/tour
mkdir -p "$out"
fails=()
fail() { echo "TOUR-CHECK FAIL $1: $2"; fails+=("$1: $2"); }
ok() { echo "TOUR-CHECK ok   $1: $2"; }
expect() { if eval "$3"; then ok "$1" "$2"; else fail "$1" "$2"; fi; }

declare -A blurb=(
	[noiommu]="no IOMMU, 256M: edu gets physical addresses (bus address = physical)"
	[iommu]="intel-iommu, 512M: edu gets IOVAs below its 28-bit mask, the BO as one segment"
	[bounce]="no IOMMU, swiotlb=force: edu gets swiotlb bounce slots, segments of at most 256 KiB"
	[widemask]="no IOMMU, 512M, edu's dma_mask 64-bit: physical addresses above 256 MiB are fine"
	[highmem]="no IOMMU, 512M, 28-bit mask: user pages above 256 MiB are refused"
	[debug]="the debug kernel, intel-iommu, 1G: as iommu, and the DMA API's own record (dma-api/dump)"
)

# SUMMARY <what> k=v ... -> the value of k (edu-inspect prints one such line per section).
val() { sed -n "s/^SUMMARY $2 .*\\b$3=\\([^ ]*\\).*/\\1/p" "$1" | head -n1; }

# The IOVA pages of the copy (what edu-inspect expects from pagemap) against what QEMU's
# intel-iommu translated them to (vtd_dmar_translate).
join_iommu() {
	local dir=$1
	awk '
	NR == FNR { want[$1] = $2; who[$1] = $3; order[++n] = $1; next }
	/vtd_dmar_translate/ {
		for (i = 1; i <= NF; i++) { if ($i == "iova") iova = $(i + 1); if ($i == "gpa") gpa = $(i + 1) }
		seen[iova] = seen[iova] ? seen[iova] : gpa; if (seen[iova] != gpa) clash[iova] = 1; lines++
	}
	END {
		printf "  QEMU logged %d translations for edu (vtd_dmar_translate); the copy touched %d IOVA pages.\n", lines, n
		printf "  Each IOVA page edu was given, the guest-physical page QEMU'"'"'s IOMMU turned it into,\n"
		printf "  and the page pagemap shows for that byte of the buffer:\n"
		printf "    %-11s %-8s %-14s %-14s\n", "IOVA page", "buffer", "QEMU: gpa", "pagemap: phys"
		for (k = 1; k <= n; k++) {
			i = order[k]
			if (!(i in seen)) missing++; else if (seen[i] != want[i] || (i in clash)) wrong++; else good++
			if (k <= 3 || k > n - 3 || who[order[k - 1]] != who[i] || who[order[k + 1]] != who[i]) {
				printf "    %-11s %-8s %-14s %-14s %s\n", i, who[i], (i in seen) ? seen[i] : "-", want[i],
					(i in seen) && seen[i] == want[i] ? "same page" : "DIFFERENT"
				gap = 0
			} else if (!gap++) {
				printf "    ...\n"
			}
		}
		printf "  %d of %d IOVA pages translated to the page pagemap shows (%d elsewhere, %d never seen)\n",
			good, n, wrong, missing
		printf "SUMMARY xlate pages=%d match=%d differ=%d unseen=%d\n", n, good, wrong + 0, missing + 0
	}' "$dir/xlate.txt" "$dir/qemu-trace.log"
}

check_config() {
	local c=$1 f=$2 d=$3
	local ud bd t p
	ud=$(val "$f" userptr dma) bd=$(val "$f" bo dma)
	t=$(val "$f" copy transfers) p=$(val "$f" copy predicted)
	case $c in
	iommu | debug)
		expect $c "one DMA segment per buffer (userptr $ud, bo $bd)" '[ "$ud" = 1 ] && [ "$bd" = 1 ]'
		expect $c "DMA addresses below 2^28" \
			'[ $(($(val "$f" userptr dma_end))) -le $((1 << 28)) ] && [ $(($(val "$f" bo dma_end))) -le $((1 << 28)) ]'
		expect $c "a 1 MiB copy takes 2 * ceil(1 MiB / 4095) = 514 transfers ($t)" '[ "$t" = 514 ]'
		expect $c "QEMU translated every IOVA page of the copy to the page pagemap shows" \
			'[ "$(val "$d/join.txt" xlate differ)" = 0 ] && [ "$(val "$d/join.txt" xlate unseen)" = 0 ] &&
			 [ "$(val "$d/join.txt" xlate match)" -gt 0 ]'
		;;
	noiommu | widemask)
		expect $c "DMA address = physical address of every SG entry" \
			'[ "$(val "$f" userptr dma_equals_phys)" = yes ] && [ "$(val "$f" bo dma_equals_phys)" = yes ]'
		;;
	bounce)
		expect $c "DMA addresses are swiotlb slots, not the pages" \
			'[ "$(val "$f" userptr dma_equals_phys)" = no ] && [ "$(val "$f" bo dma_equals_phys)" = no ]'
		expect $c "DMA segments of at most 256 KiB" \
			'[ "$(val "$f" userptr max_dma_seg)" -le 262144 ] && [ "$(val "$f" bo max_dma_seg)" -le 262144 ]'
		;;
	highmem)
		expect $c "user memory above the mask is refused with ERANGE and one dmesg line" \
			'[ "$(val "$f" refusal errno)" = ERANGE ] && [ "$(val "$f" refusal dmesg)" = yes ]'
		expect $c "the driver's own BO is still reachable (below 2^28)" \
			'[ -n "$bd" ] && [ $(($(val "$f" bo dma_end))) -le $((1 << 28)) ]'
		;;
	esac
	if [ $c = debug ]; then
		local b
		for b in userptr bo; do
			expect $c "$b: dma-api/dump has its DMA segment(s) at the same IOVA and size, with its SG pages" \
				'[ "$(val "$f" dma_api_$b covered)" = yes ] && [ "$(val "$f" dma_api_$b phys)" = yes ] &&
				 [ "$(val "$f" dma_api_$b bytes)" = "$(val "$f" $b size)" ]'
		done
	fi
	if [ $c != highmem ]; then
		# Docs: 514 with one segment per side, up to one more transfer per segment boundary.
		expect $c "copy: $t transfers = the $p predicted from the segments, within 514..514+boundaries" \
			'[ -n "$t" ] && [ "$t" = "$p" ] && [ "$t" -ge 514 ] && [ "$t" -le $((514 + ud - 1 + bd - 1)) ]'
	fi
	expect $c "pool: the freed block waits for its copy (to B early: $(val "$f" pool to_b_early))" \
		'[ "$(val "$f" pool copy_done_early)" = yes ] || [ "$(val "$f" pool to_b_early)" = no ]'
	expect $c "edu-inspect's own checks and the VM run pass" '[ "$(cat "$d/vm-rc")" = 0 ]'
}

for c in "${configs[@]}"; do
	if [ "$c" = debug ] && [ ! -f "$build/kernel-debug/edu_accel.ko" ]; then
		echo "tour: debug needs the module built against the debug kernel: make kernel-debug" >&2
		exit 2
	fi
done

t0=$(date +%s)
for c in "${configs[@]}"; do
	d=$out/$c
	args="--copy --pool --xlate /out/xlate.txt $check"
	[ "$c" = highmem ] && args+=" --above-mask"
	qt=()
	case $c in iommu | debug) qt=(--qemu-trace vtd_dmar_translate) ;; esac
	"$src/qemu/run-vm.sh" --quiet --config "$c" --out "$d" "${qt[@]}" -- \
		"hostrun \$BUILD/cmake/userspace/edu-inspect $args > /out/inspect.txt 2>&1" > "$d.result" 2>&1
	echo $? > "$d.rc"
done
# run-vm.sh empties its out directory, so the status is moved in only now.
for c in "${configs[@]}"; do mv "$out/$c.rc" "$out/$c/vm-rc"; mv "$out/$c.result" "$out/$c/vm-result"; done

for c in "${configs[@]}"; do
	d=$out/$c f=$out/$c/inspect.txt
	echo
	echo "################ $c: ${blurb[$c]:-} ################"
	grep -v '^SUMMARY' "$f" 2> /dev/null || echo "(no output from edu-inspect)"
	if [ -s "$d/qemu-trace.log" ] && [ -s "$d/xlate.txt" ]; then
		echo
		echo "-- both sides of the IOMMU: the driver's IOVAs, QEMU's translation (-trace vtd_dmar_translate) --"
		join_iommu "$d" > "$d/join.txt"
		grep -v '^SUMMARY' "$d/join.txt"
	fi
	tail -n 1 "$d/vm-result"
done

echo
echo "################ summary: one 1 MiB buffer in each configuration ################"
# The DMA API's record exists on the debug kernel only: its column appears when one was run.
dump=
for c in "${configs[@]}"; do [ -n "$(val "$out/$c/inspect.txt" dma_api_bo entries)" ] && dump=1; done
col() { if [ -n "$dump" ]; then printf '%-14s ' "$1"; fi; }
printf '%-9s %-24s %-16s %-16s %-11s %s%-s\n' config "user mem: runs/sg/dma" "BO: runs/sg/dma" "copy: transfers" "top DMA" \
	"$(col "dma-api dump")" "a DMA address is"
for c in "${configs[@]}"; do
	f=$out/$c/inspect.txt
	if [ -n "$(val "$f" refusal errno)" ]; then
		u="refused: $(val "$f" refusal errno)"
	else
		u="$(val "$f" userptr pfn_runs)/$(val "$f" userptr sg)/$(val "$f" userptr dma)"
	fi
	b="$(val "$f" bo pfn_runs)/$(val "$f" bo sg)/$(val "$f" bo dma)"
	t=$(val "$f" copy transfers)
	case $c in
	iommu | debug) how="an IOVA (one range per BO)" ;;
	bounce) how="a swiotlb bounce slot" ;;
	*) how="the physical address" ;;
	esac
	top=$(printf '%s\n' "$(val "$f" userptr dma_end)" "$(val "$f" bo dma_end)" | sort -g | tail -n1)
	m=-
	if [ -n "$(val "$f" dma_api_bo entries)" ]; then
		m="$(val "$f" dma_api_userptr entries)/$(val "$f" dma_api_bo entries)"
		[ "$(val "$f" dma_api_userptr covered)$(val "$f" dma_api_userptr phys)$(val "$f" dma_api_bo covered)$(val "$f" dma_api_bo phys)" = yesyesyesyes ] &&
			m+=" agree" || m+=" DIFFER"
	fi
	printf '%-9s %-24s %-16s %-16s %-11s %s%-s\n' "$c" "$u" "$b" "${t:--}" "${top:--}" "$(col "$m")" "$how"
done
echo "(runs: physically contiguous runs in pagemap; sg: the driver's SG entries; dma: DMA segments;"
echo " a 1 MiB copy takes at least 514 transfers, one more per segment end inside a 4095-byte chunk;"
echo " top DMA: one past the highest address edu was given)"
[ -z "$dump" ] || echo "(dma-api dump: the DMA API's entries for user mem/BO (debug kernel), checked against the segments)"
echo "tour: $(($(date +%s) - t0)) s for ${#configs[@]} configuration(s); files in $out/<config>/"

if [ -n "$check" ]; then
	echo
	for c in "${configs[@]}"; do check_config "$c" "$out/$c/inspect.txt" "$out/$c"; done
	if [ ${#fails[@]} -gt 0 ]; then
		echo "TOUR-RESULT FAIL (${#fails[@]}): ${fails[*]}"
		exit 1
	fi
	echo "TOUR-RESULT PASS"
fi
