# Filters a guest kernel log (dmesg or console) before the judges grep it for kernel reports:
# a report known to come from the guest kernel itself, whatever the driver does, has its
# marker rewritten to "known kernel report (NAME): ..." so the report pattern no longer
# matches it. Every other line passes through unchanged (carriage returns dropped).
# Used by qemu/check-guest.sh and tests/stress/run-stress.sh; edu_stress's in-guest scan
# (tests/stress/stress_util.hpp, KernelLog) applies the same rule.
#
# pciehp-lockdep: the debug kernel's pciehp (Debian 6.1) drops and retakes ctrl->reset_lock
# inside pci_lock_rescan_remove() in pciehp_unconfigure_device(), and lockdep reports that
# as a circular dependency on the first hot-unplug of any device (QEMU device_del), with or
# without edu_accel. Excused only when the report names both locks at that function; lockdep
# is off for the rest of the boot after it.
function flush(   i, text) {
	if (!n)
		return
	text = ""
	for (i = 1; i < n; i++)
		text = text "\n" buf[i]
	if (text ~ /[(]&ctrl->reset_lock[)][^\n]* at: pciehp_unconfigure_device/ &&
	    text ~ /[(]pci_rescan_remove_lock[)][^\n]* at: pciehp_unconfigure_device/)
		sub(/WARNING: possible circular/, "known kernel report (pciehp-lockdep): possible circular", buf[0])
	for (i = 0; i < n; i++)
		print buf[i]
	n = 0
}
{ sub(/\r$/, "") }
n {
	buf[n++] = $0
	if (n > 14)
		flush()
	next
}
/WARNING: possible circular locking dependency detected/ {
	buf[0] = $0
	n = 1
	next
}
{ print }
END { flush() }
