# edu-accel + hostrt: one entry point for building, running and testing.
#   make          driver, runtime, tools and tests
#   make run      boot the VM, load the driver, run the demo, print the report
#   make check    every test suite (host tests, then in-VM suites in each machine configuration,
#                 the debug kernel's among them: its first build takes ~10 minutes)
#   make shell    the VM with the driver loaded, interactive (leave with `exit`)
#   make bench    benchmarks; METRIC lines land in build/bench/metrics.txt
#   make coverage-report  line and branch coverage of the last runs (make check prints it)
#   make stress   adversarial stress (tests/stress/): long run on the debug kernel plus the SMP
#                 part on smp2; one table and METRIC stress_* lines (STRESS_SEED=N to reseed)
# CONFIG=<name> picks a VM configuration from qemu/configs/ for run and shell.

BUILD    := $(CURDIR)/build
CMAKEDIR := $(BUILD)/cmake
CONFIG   ?= iommu
JOBS     ?= 2

all: kernel userspace

$(BUILD)/.deps-ok: scripts/deps.sh
	scripts/deps.sh
	@mkdir -p $(BUILD) && touch $@

deps: $(BUILD)/.deps-ok

kernel: deps
	$(MAKE) -C kernel

# The module built against the debug kernel (built once, ~10 min, cached under ~/.cache).
kernel-debug: deps
	scripts/build-debug-module.sh $(BUILD)

# sparse over the whole driver; any warning fails.
sparse: deps
	@$(MAKE) -s -C kernel sparse 2>&1 | tee $(BUILD)/sparse.log
	@! grep -E 'warning|error' $(BUILD)/sparse.log

$(CMAKEDIR)/CMakeCache.txt: | deps
	cmake -S . -B $(CMAKEDIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo

userspace: deps $(CMAKEDIR)/CMakeCache.txt
	cmake --build $(CMAKEDIR) -j$(JOBS)

# The showcase (hostrt-demo on every device), then the traced two-process workload, a report
# of what the trace shows and the timeline (as make trace).
run: all
	scripts/record-trace.sh $(CONFIG) --run

# Each phase and CTest entry is timed; the table at the end (scripts/check-times.sh) says
# where the time went. CTest runs JOBS entries at a time (PROCESSORS in tests/ keeps VMs with
# more vCPUs, and the sparse rebuild, apart).
TIMES := $(BUILD)/check-times
# Coverage comes from this run's counters only: the debug VM runs' (kernel) and the coverage
# build's on the host and in vm.iommu.coverage (runtime); reports under build/coverage/.
check:
	@rm -rf $(TIMES) && mkdir -p $(TIMES) && touch $(TIMES)/started
	@scripts/timed.sh $(TIMES) build $(MAKE) all
	@scripts/timed.sh $(TIMES) kernel-debug $(MAKE) kernel-debug
	@cd $(CMAKEDIR) && $(CURDIR)/scripts/timed.sh $(TIMES) ctest ctest -j$(JOBS) --output-on-failure; rc=$$?; \
		$(CURDIR)/scripts/check-times.sh $(BUILD); \
		$(MAKE) -s -C $(CURDIR) coverage-report SINCE=$(TIMES)/started || rc=1; exit $$rc

# The coverage figures of the runs made since SINCE (default: all runs there are).
SINCE ?=
COVDIR := $(BUILD)/coverage
coverage-report:
	@scripts/coverage-report.sh kernel $(COVDIR)/kernel \
		$$(find $(BUILD)/vm/runs -mindepth 1 -maxdepth 1 -name 'debug-*' \
			-not -name '*stress_long' $(if $(SINCE),-newer $(SINCE)))
	@scripts/coverage-report.sh runtime $(COVDIR)/runtime $(BUILD)/cmake-coverage \
		$$(find $(BUILD)/vm/runs -mindepth 1 -maxdepth 1 -name '*-coverage' $(if $(SINCE),-newer $(SINCE)))

shell: all
	qemu/run-vm.sh --config $(CONFIG) --test-mode --shell

# The driver's tracepoints during a two-process workload, as a timeline: build/trace/timeline.json
# (ui.perfetto.dev, chrome://tracing) and timeline.png / .svg.
trace: all
	scripts/record-trace.sh $(CONFIG)

# One 1 MiB buffer (registered user memory and a driver BO) through noiommu, iommu, bounce,
# widemask and highmem: edu-inspect in each guest, QEMU's IOMMU trace joined with the driver's
# IOVAs, a table comparing them, and what Documentation/driver.md predicts checked in each.
# TOUR_CONFIGS picks the machines; `debug` (the debug kernel's DMA-API record of each mapping)
# only runs when named, e.g. make tour TOUR_CONFIGS="noiommu iommu bounce widemask highmem debug".
TOUR_CONFIGS ?=
tour: all $(if $(filter debug,$(TOUR_CONFIGS)),kernel-debug)
	scripts/tour.sh --check $(TOUR_CONFIGS)
.PHONY: tour

bench: all
	tests/bench/run-bench.sh

# Checks to report as KNOWN-BUG instead of failing (see tests/stress/CMakeLists.txt); none
# today: the bugs they were named for are fixed.
STRESS_KNOWN_BUGS ?=
STRESS_SEED ?= 12
stress: all kernel-debug
	@tests/stress/run-stress.sh --mode long --seed $(STRESS_SEED) --known-bug "$(STRESS_KNOWN_BUGS)" \
		debug:isolation,fuzz,kill,fault,unplug smp2:smp; rc=$$?; \
	COVERAGE_METRIC=stress_kernel scripts/coverage-report.sh kernel $(COVDIR)/stress \
		$(BUILD)/vm/runs/debug-stress_long || rc=1; \
	scripts/coverage-report.sh fuzz $(COVDIR)/stress-fuzz $(BUILD)/vm/runs/debug-stress_long || rc=1; \
	exit $$rc

clean:
	-$(MAKE) -C kernel clean
	rm -rf $(CMAKEDIR) $(BUILD)/vm/runs $(BUILD)/bench

# Also drops the cached kernel image and initramfs.
distclean: clean
	rm -rf $(BUILD)

.PHONY: all deps kernel kernel-debug sparse userspace run check coverage-report shell trace bench stress \
	clean distclean
