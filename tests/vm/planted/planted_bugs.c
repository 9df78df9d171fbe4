// SPDX-License-Identifier: GPL-2.0
/*
 * Bugs planted on purpose, one per load, so that a test can prove the debug kernel and the
 * run's judge still catch them (tests/vm/judge-selftest.sh). Never loaded outside that test.
 */
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/string.h>

static char *bug = "none";
module_param(bug, charp, 0444);
MODULE_PARM_DESC(bug, "uaf: read freed memory; lock: take two mutexes in both orders; leak: lose an allocation");

static DEFINE_MUTEX(planted_a);
static DEFINE_MUTEX(planted_b);

static noinline int planted_uaf(void)
{
	volatile char *p = kmalloc(64, GFP_KERNEL);
	char c;

	if (!p)
		return -ENOMEM;
	kfree((void *)p);
	c = p[8];
	pr_info("planted_bugs: read %d from freed memory\n", c);
	return 0;
}

/*
 * Allocated and forgotten. The self test unloads the module before the guest's kmemleak scan,
 * as the real runs unload edu_accel, so the report's frames are bare module addresses.
 */
static noinline int planted_leak(void)
{
	void *p = kmalloc(192, GFP_KERNEL);

	if (!p)
		return -ENOMEM;
	memset(p, 0x5a, 192);
	pr_info("planted_bugs: lost 192 bytes\n");
	return 0;
}

/* One thread, one order after the other: never a deadlock, always lockdep's cycle. */
static noinline void planted_lock_inversion(void)
{
	mutex_lock(&planted_a);
	mutex_lock(&planted_b);
	mutex_unlock(&planted_b);
	mutex_unlock(&planted_a);

	mutex_lock(&planted_b);
	mutex_lock(&planted_a);
	mutex_unlock(&planted_a);
	mutex_unlock(&planted_b);
}

static int __init planted_init(void)
{
	if (!strcmp(bug, "uaf"))
		return planted_uaf();
	if (!strcmp(bug, "leak"))
		return planted_leak();
	if (!strcmp(bug, "lock")) {
		planted_lock_inversion();
		return 0;
	}
	pr_err("planted_bugs: unknown bug '%s'\n", bug);
	return -EINVAL;
}

static void __exit planted_exit(void)
{
}

module_init(planted_init);
module_exit(planted_exit);
MODULE_DESCRIPTION("Planted bugs for the VM judge's self-test");
MODULE_LICENSE("GPL");
