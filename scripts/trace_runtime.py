"""hostrt's half of a timeline: the files HOSTRT_TRACE writes (see Documentation/hostrt.md),
joined with the driver's tracepoints by (client, queue, seqno). Used by trace-timeline.py.

Both halves are on CLOCK_MONOTONIC: the runtime reads it, and record-trace.sh sets tracefs's
trace_clock to `mono`. A stream's jobs are the driver's jobs of (client, queue), where the
runtime learnt its client id from the driver's fdinfo (device_open) and its queue at
stream_create; the copy's seqno is the job's seqno.
"""
import re

LINE = re.compile(r"^(\d+) (\d+) (\d+) (\w+)(.*)$")


def parse(paths):
    events = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = LINE.match(line.strip())
                if not m:
                    continue
                fields = dict(kv.split("=", 1) for kv in m.group(5).split() if "=" in kv)
                events.append({"ts": int(m.group(1)) / 1000.0, "pid": int(m.group(2)), "tid": int(m.group(3)),
                               "event": m.group(4), "f": fields})
    events.sort(key=lambda e: e["ts"])
    return events


def num(e, key):
    return int(e["f"][key], 0)


def stream_queues(events):
    """(pid, stream id) -> (client, queue)."""
    return {(e["pid"], num(e, "stream")): (num(e, "client"), num(e, "queue"))
            for e in events if e["event"] == "stream_create"}


def api_spans(events):
    """Each API call: its thread, name, begin, end and arguments."""
    spans, open_ = [], {}
    for e in events:
        key = (e["pid"], e["tid"])
        if e["event"] == "api_begin":
            open_.setdefault(key, []).append(e)
        elif e["event"] == "api_end" and open_.get(key):
            b = open_[key].pop()
            args = {k: v for k, v in b["f"].items() if k != "api"}
            spans.append({"pid": key[0], "tid": key[1], "name": b["f"]["api"], "ts": b["ts"], "end": e["ts"], "args": args})
    return spans


def pending_frees(events):
    """Frees that had to wait: their block, the points waited for, and when it became reusable."""
    out, last = [], {}
    for e in events:
        pid = e["pid"]
        if e["event"] == "pool_free":
            rec = {"pid": pid, "addr": num(e, "addr"), "size": num(e, "size"), "ts": e["ts"], "waits": [],
                   "stream": num(e, "stream")}
            last[(pid, rec["addr"])] = rec
            if num(e, "waits") > 0:
                out.append(rec)
        elif e["event"] == "pool_free_wait" and (pid, num(e, "addr")) in last:
            last[(pid, num(e, "addr"))]["waits"].append((num(e, "stream"), num(e, "point")))
        elif e["event"] == "pool_reusable" and (pid, num(e, "addr")) in last:
            last[(pid, num(e, "addr"))].setdefault("reusable", e["ts"])
    return out


def reuses(events):
    """Allocations that handed out memory a free of the same process gave back before."""
    out, freed = [], {}
    for e in events:
        if e["event"] == "pool_free":
            freed.setdefault(e["pid"], []).append((num(e, "addr"), num(e, "addr") + num(e, "size")))
        elif e["event"] == "pool_alloc":
            lo, hi = num(e, "addr"), num(e, "addr") + num(e, "size")
            if any(a < hi and lo < b for a, b in freed.get(e["pid"], [])):
                out.append(e)
    return out


def check(events, jobs):
    """No pool block is handed out again before the last job that used its memory is done.

    Derived from the copies themselves, not from the pool's own account of its waits: every
    copy's ranges are uses of that memory until the job with the copy's last seqno is done
    (the driver's edu_job_done of that (client, queue, seqno)); an allocation of memory with a
    use whose job is not yet done is a reuse too early. Also: a free that waited became
    reusable only after the jobs it waited for were done.
    """
    bad = []
    queues = stream_queues(events)
    done = {k: j["done"] for k, j in jobs.items() if "done" in j}

    def done_at(pid, stream, point):
        cq = queues.get((pid, stream))
        return None if cq is None else done.get((cq[0], cq[1], point))

    uses = {}  # pid -> [(lo, hi, stream, point, ts)]
    copy = {}
    for e in events:
        pid = e["pid"]
        if e["event"] == "copy":
            copy[(pid, e["tid"])] = e
        elif e["event"] == "copy_points" and (pid, e["tid"]) in copy:
            c = copy.pop((pid, e["tid"]))
            n = num(c, "bytes")
            for end in ("src", "dst"):
                lo = num(c, end)
                uses.setdefault(pid, []).append((lo, lo + n, num(e, "stream"), num(e, "last"), e["ts"]))
        elif e["event"] == "pool_alloc":
            lo, hi = num(e, "addr"), num(e, "addr") + num(e, "size")
            keep = []
            for u in uses.get(pid, []):
                if u[1] <= lo or u[0] >= hi:
                    keep.append(u)
                    continue
                t = done_at(pid, u[2], u[3])
                if t is None:
                    bad.append(f"pid {pid}: block 0x{lo:x} handed out at {e['ts']:.0f} us; the driver's trace has no "
                               f"end for the job (stream {u[2]}, seqno {u[3]}) that used it")
                elif t > e["ts"]:
                    bad.append(f"pid {pid}: block 0x{lo:x} handed out at {e['ts']:.0f} us while the job (stream {u[2]}, "
                               f"seqno {u[3]}) using it ran until {t:.0f} us")
            uses[pid] = keep
    for fr in pending_frees(events):
        for stream, point in fr["waits"]:
            t = done_at(fr["pid"], stream, point)
            if t is not None and "reusable" in fr and fr["reusable"] < t:
                bad.append(f"pid {fr['pid']}: block 0x{fr['addr']:x} made reusable at {fr['reusable']:.0f} us before "
                           f"stream {stream}'s job {point} ended at {t:.0f} us")
    return bad


def to_trace_events(events, jobs, queue_tid, first_pid=10):
    """Trace-event records: a process per traced program (a track per thread with its API calls,
    one for its pool), and a flow arrow from each job that held a block to the moment the pool
    saw it done and made the block reusable. queue_tid maps (client, queue) to the queue's tid in
    the driver's 'queues' process (pid 2)."""
    out = []
    pids = sorted({e["pid"] for e in events})
    tp = {pid: first_pid + i for i, pid in enumerate(pids)}
    for pid in pids:
        out.append({"ph": "M", "pid": tp[pid], "tid": 0, "name": "process_name",
                    "args": {"name": f"hostrt, process {pid}"}})
        out.append({"ph": "M", "pid": tp[pid], "tid": 1, "name": "thread_name",
                    "args": {"name": "pool: blocks freed, waiting for their jobs"}})
    threads = {}
    for s in api_spans(events):
        key = (s["pid"], s["tid"])
        if key not in threads:
            threads[key] = 100 + len(threads)
            out.append({"ph": "M", "pid": tp[s["pid"]], "tid": threads[key], "name": "thread_name",
                        "args": {"name": f"thread {s['tid']}: API calls"}})
        out.append({"ph": "X", "pid": tp[s["pid"]], "tid": threads[key], "cat": "api", "name": s["name"],
                    "ts": s["ts"], "dur": max(s["end"] - s["ts"], 0.001), "args": s["args"]})
    for e in (e for e in events if e["event"] == "pool_alloc"):
        out.append({"ph": "i", "s": "t", "pid": tp[e["pid"]], "tid": 1, "cat": "pool", "ts": e["ts"],
                    "name": f"allocate 0x{num(e, 'addr'):x} ({e['f'].get('source')})", "args": dict(e["f"])})
    queues = stream_queues(events)
    flow = 1
    for fr in pending_frees(events):
        end = fr.get("reusable")
        if end is None:
            continue
        waits = ", ".join(f"stream {s} point {p}" for s, p in fr["waits"])
        out.append({"ph": "X", "pid": tp[fr["pid"]], "tid": 1, "cat": "pool", "ts": fr["ts"],
                    "dur": max(end - fr["ts"], 0.001), "name": f"block 0x{fr['addr']:x} pending",
                    "args": {"size": fr["size"], "waits for": waits}})
        for stream, point in fr["waits"]:
            cq = queues.get((fr["pid"], stream))
            j = jobs.get((cq[0], cq[1], point)) if cq else None
            if not j or "done" not in j or cq not in queue_tid:
                continue
            out.append({"ph": "s", "id": flow, "pid": 2, "tid": queue_tid[cq], "cat": "reuse", "name": "job done -> block reusable",
                        "ts": j["done"] - 0.001})
            out.append({"ph": "f", "bp": "e", "id": flow, "pid": tp[fr["pid"]], "tid": 1, "cat": "reuse",
                        "name": "job done -> block reusable", "ts": end - 0.001})
            flow += 1
    return out
