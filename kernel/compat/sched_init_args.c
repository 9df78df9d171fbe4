// SPDX-License-Identifier: GPL-2.0
/* Compiles when drm_sched_init() takes a struct drm_sched_init_args (Debian's 6.1, 6.15+). */
#include <drm/gpu_scheduler.h>
#include <linux/module.h>

int edu_probe(struct drm_gpu_scheduler *sched);
int edu_probe(struct drm_gpu_scheduler *sched)
{
	const struct drm_sched_init_args args = { .credit_limit = 1 };

	return drm_sched_init(sched, &args);
}
MODULE_LICENSE("GPL");
