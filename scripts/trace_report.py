"""make run's report: what the trace says happened, in a few lines a newcomer can read.
Used by trace-timeline.py --report."""
import trace_runtime


def _bo_events(events, client):
    """The client's BO lifecycle events (pin, map, unmap, unpin) in order."""
    return [e for e in events if e["event"].startswith("edu_bo_") and e["f"].get("client") == str(client)]


def one_buffer(events, jobs, xfers):
    """The buffer the first transfer touched: its pin, mapping, transfers and fence."""
    if not xfers:
        return ["no transfer in the trace"]
    first = xfers[0]
    client, queue, seqno = first["key"]
    ram = int(first["ram"], 16)
    bo = None
    for e in _bo_events(events, client):
        if e["event"] == "edu_bo_map" and e["ts"] <= first["ts"]:
            start, _, size = e["f"]["first"].partition("+")
            if int(start, 16) <= ram < int(start, 16) + int(size):
                bo = e
    if bo is None:
        return [f"the first transfer (client {client}) touched 0x{ram:x}, in no mapping the trace shows"]
    f = bo["f"]
    start, _, seg = f["first"].partition("+")
    lo, hi = int(start, 16), int(start, 16) + int(seg)
    pin = next((e for e in reversed(_bo_events(events, client)) if e["event"] == "edu_bo_pin" and e["ts"] <= bo["ts"]), None)
    kind = "user memory at " + f["user"] + " (BO_USERPTR)" if f["user"] != "0x0" else "driver memory (BO_CREATE)"
    out = [f"one buffer: {int(f['size'])} bytes of {kind}, client {client}"]
    if pin:
        out.append(f"  pinned      {pin['f']['pages']} pages (edu_bo_pin, ret={pin['f']['ret']})")
    out.append(f"  mapped      {f['sg']} SG entries -> {f['dma']} DMA segment(s), the first at bus address {start} "
               f"({int(seg)} bytes) (edu_bo_map)")
    mine = [x for x in xfers if lo <= int(x["ram"], 16) < hi]
    by_job = {}
    for x in mine:
        by_job.setdefault(x["key"], []).append(x)
    for key, xs in sorted(by_job.items(), key=lambda kv: kv[1][0]["ts"])[:3]:
        j = jobs.get(key, {})
        moved = sum(x["len"] for x in xs)
        ways = sorted({"dev->ram" if x["to_ram"] else "ram->dev" for x in xs})
        out.append(f"  job         queue {key[1]} seqno {key[2]}: {len(xs)} transfers ({', '.join(ways)}, {moved} bytes) "
                   f"from {xs[0]['ram']} to {xs[-1]['ram']}+{xs[-1]['len']}, "
                   f"{(j.get('done', 0) - j.get('start', 0)) / 1000:.1f} ms on the engine")
    if len(by_job) > 3:
        out.append(f"  ...         {len(by_job) - 3} more jobs touched it")
    done = next((e for e in events if e["event"] == "edu_job_done" and
                 (int(e["f"]["client"]), int(e["f"]["queue"]), int(e["f"]["seqno"])) == first["key"]), None)
    if done:
        out.append(f"  fence       job {seqno} of queue {queue}: hardware fence {done['f']['hw_fence']} signalled, "
                   f"error {done['f']['error']} (edu_job_done)")
    gone = [e["event"][len("edu_bo_"):] for e in _bo_events(events, client) if e["ts"] > bo["ts"]
            and e["event"] in ("edu_bo_unmap", "edu_bo_unpin")]
    if gone:
        out.append(f"  released    {' then '.join(dict.fromkeys(gone))} when its last handle closed")
    return out


def engine(xfers):
    done = [x for x in xfers if "end" in x]
    if not done:
        return ["engine: no transfer"]
    busy = sum(x["end"] - x["ts"] for x in done)
    span = max(x["end"] for x in done) - min(x["ts"] for x in done)
    return [f"engine: {len(done)} transfers, busy {busy / 1000:.1f} ms of the {span / 1000:.1f} ms between the first and "
            f"the last: utilization {busy / span:.3f} (the device's limit is 1: one DMA channel, one transfer at a time)"]


def pool(runtime, jobs):
    allocs = [e for e in runtime if e["event"] == "pool_alloc"]
    if not allocs:
        return ["pool: no traced allocation (HOSTRT_TRACE was not set?)"]
    new = sum(1 for e in allocs if e["f"].get("source") == "new_segment")
    frees = trace_runtime.pending_frees(runtime)
    reused = trace_runtime.reuses(runtime)
    early = trace_runtime.check(runtime, jobs)
    verdict = ("none before the job that used them ended" if not early else
               f"{len(early)} of them too early (see --check)")
    return [f"pool: {len(allocs)} allocations, {len(allocs) - new} served from the pool (hit rate "
            f"{(len(allocs) - new) / len(allocs):.2f}), {new} from new segments; {len(frees)} frees waited for "
            f"their job, {len(reused)} blocks handed out again, {verdict}"]


def report(events, jobs, xfers, runtime, paths):
    lines = ["== what the trace shows =="] + one_buffer(events, jobs, xfers) + engine(xfers) + pool(runtime, jobs)
    lines += ["timeline: " + ", ".join(paths) + " (open the .json in https://ui.perfetto.dev or chrome://tracing)"]
    return "\n".join(lines)
