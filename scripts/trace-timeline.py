#!/usr/bin/env python3
"""The driver's trace (tracefs text, edu_accel:* events) as a timeline.

  trace-timeline.py TRACE.txt OUT_PREFIX [--runtime HOSTRT_TRACE_FILE...] [--check] [--report]

writes OUT_PREFIX.json (Chrome/Perfetto trace-event format: open it in ui.perfetto.dev or
chrome://tracing) and OUT_PREFIX.png / .svg (the same timeline as a picture, if matplotlib is
installed). Tracks: the engine (each transfer a slice, coloured by client, and the scrubs
between clients), and one track per queue of each client (each job: waiting from SUBMIT to
the engine's head, then on the engine until its fence signals), drm_sched's and dma_fence's
events, and with --runtime the files hostrt's HOSTRT_TRACE wrote: each program's API calls per
thread and its pool (blocks freed and waiting for their jobs, with an arrow from the job that
made each reusable; see trace_runtime.py).

--check validates the JSON against the trace-event format and checks invariants on the
trace: every transfer lies inside its job's span, transfers never overlap (one engine), and
the device buffer is scrubbed exactly when its client changes, and (with --runtime) that no
pool block is handed out again before the last job that used it is done. Exit status 1 on a
violation.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_report  # noqa: E402
import trace_runtime  # noqa: E402

LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\][^:]*?\s(?P<ts>\d+\.\d+):\s+"
                  r"(?P<event>edu_\w+):\s(?P<fields>.*)$")
FIELD = re.compile(r"(\w+)=(\S+)")
# drm_sched's and dma_fence's events, shown beside ours as they are.
OTHER = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\][^:]*?\s(?P<ts>\d+\.\d+):\s+"
                   r"(?P<event>drm_\w+|dma_fence_\w+):\s(?P<fields>.*)$")


def parse_other(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = OTHER.match(line)
            if m:
                out.append({"ts": float(m.group("ts")) * 1e6, "event": m.group("event"),
                            "text": m.group("fields").strip(), "task": m.group("task").strip()})
    return out


def parse(path):
    events = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            fields = dict(FIELD.findall(m.group("fields")))
            words = m.group("fields").split()
            events.append({"ts": float(m.group("ts")) * 1e6, "event": m.group("event"), "f": fields,
                           "words": words, "task": m.group("task").strip(), "pid": int(m.group("pid"))})
    return events


def job_key(e):
    f = e["f"]
    return (int(f["client"]), int(f["queue"]), int(f["seqno"]))


def build(events):
    """Jobs, transfers and scrubs with their times (µs)."""
    jobs, xfers, scrubs, open_xfer, open_scrub = {}, [], [], None, None
    for e in events:
        name, ts = e["event"], e["ts"]
        if name in ("edu_job_queued", "edu_job_run", "edu_job_start", "edu_job_done"):
            j = jobs.setdefault(job_key(e), {"key": job_key(e)})
            j[name[len("edu_job_"):]] = ts
            if name == "edu_job_done":
                j["error"] = int(e["f"].get("error", "0"))
        if name == "edu_scrub":
            open_scrub = {"ts": ts, "from": int(e["f"]["from_client"]), "to": int(e["f"]["to_client"])}
            scrubs.append(open_scrub)
        if name == "edu_xfer_start":
            if open_scrub is not None and "end" not in open_scrub:
                open_scrub["end"] = ts  # the engine starts the next transfer as the clear ends
            to_ram = "dev->ram" in e["words"]
            open_xfer = {"key": job_key(e), "ts": ts, "len": int(e["f"]["len"]), "to_ram": to_ram,
                         "ram": e["f"]["ram"], "dev": e["f"]["dev"]}
            xfers.append(open_xfer)
        if name == "edu_xfer_done" and open_xfer is not None and open_xfer["key"] == job_key(e):
            open_xfer["end"] = ts
            open_xfer = None
    return jobs, xfers, scrubs


def queue_tids(jobs):
    tids = {}
    for (client, queue, _) in sorted(jobs):
        tids.setdefault((client, queue), len(tids) + 1)
    return tids


def to_trace_events(jobs, xfers, scrubs, others=(), runtime=()):
    out = [{"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "edu engine (one DMA channel)"}},
           {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "transfers"}},
           {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "scrubs (buffer cleared for a new client)"}},
           {"ph": "M", "pid": 2, "tid": 0, "name": "process_name", "args": {"name": "queues (client / queue)"}}]
    tids = queue_tids(jobs)
    for (client, queue), tid in tids.items():
        out.append({"ph": "M", "pid": 2, "tid": tid, "name": "thread_name",
                    "args": {"name": f"client {client} queue {queue}"}})
    for (client, queue, seqno), j in sorted(jobs.items()):
        if "queued" not in j or "done" not in j:
            continue
        tid = tids[(client, queue)]
        args = {"client": client, "queue": queue, "seqno": seqno, "error": j.get("error", 0)}
        out.append({"ph": "X", "pid": 2, "tid": tid, "name": f"job {seqno}", "cat": "job", "ts": j["queued"],
                    "dur": j["done"] - j["queued"], "args": args})
        if "start" in j:
            out.append({"ph": "X", "pid": 2, "tid": tid, "name": "on the engine", "cat": "job",
                        "ts": j["start"], "dur": j["done"] - j["start"], "args": args})
    for x in xfers:
        if "end" not in x:
            continue
        client, queue, seqno = x["key"]
        out.append({"ph": "X", "pid": 1, "tid": 1, "cat": "transfer",
                    "name": f"{'dev->ram' if x['to_ram'] else 'ram->dev'} {x['len']} B (client {client})",
                    "ts": x["ts"], "dur": x["end"] - x["ts"],
                    "args": {"client": client, "queue": queue, "seqno": seqno, "ram": x["ram"], "dev": x["dev"]}})
    for s in scrubs:
        if "end" in s:
            out.append({"ph": "X", "pid": 1, "tid": 2, "cat": "scrub", "name": f"scrub {s['from']} -> {s['to']}",
                        "ts": s["ts"], "dur": s["end"] - s["ts"], "args": {"from_client": s["from"], "to_client": s["to"]}})
    if others:
        out.append({"ph": "M", "pid": 3, "tid": 0, "name": "process_name", "args": {"name": "kernel: drm_sched and dma_fence"}})
        names = sorted({o["event"] for o in others})
        for i, name in enumerate(names):
            out.append({"ph": "M", "pid": 3, "tid": i + 1, "name": "thread_name", "args": {"name": name}})
        for o in others:
            out.append({"ph": "i", "s": "t", "pid": 3, "tid": names.index(o["event"]) + 1, "cat": "kernel",
                        "name": o["event"], "ts": o["ts"], "args": {"fields": o["text"], "task": o["task"]}})
    out += trace_runtime.to_trace_events(runtime, jobs, tids)
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"source": "edu_accel, gpu_scheduler and dma_fence tracepoints (tracefs), hostrt's HOSTRT_TRACE",
                          "clock": "CLOCK_MONOTONIC (tracefs trace_clock mono), microseconds"}}


def check_format(doc):
    """The trace-event format's rules that viewers rely on."""
    bad = []
    if not isinstance(doc.get("traceEvents"), list):
        return ["traceEvents is not a list"]
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") not in ("X", "M", "i", "s", "f"):
            bad.append(f"event {i}: unknown phase {e.get('ph')!r}")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            bad.append(f"event {i}: pid/tid must be integers")
        if not isinstance(e.get("name"), str):
            bad.append(f"event {i}: name must be a string")
        if e.get("ph") == "X":
            if not isinstance(e.get("ts"), (int, float)) or not isinstance(e.get("dur"), (int, float)):
                bad.append(f"event {i}: X needs numeric ts and dur")
            elif e["dur"] < 0:
                bad.append(f"event {i}: negative duration")
    return bad


def check_invariants(jobs, xfers, scrubs, events):
    bad = []
    for x in xfers:
        j = jobs.get(x["key"])
        if j is None or "start" not in j or "done" not in j:
            bad.append(f"transfer at {x['ts']:.0f} us of job {x['key']} whose start or end is not in the trace")
        elif not (j["start"] <= x["ts"] and x.get("end", x["ts"]) <= j["done"]):
            bad.append(f"transfer at {x['ts']:.0f} us outside job {x['key']} [{j['start']:.0f}, {j['done']:.0f}]")
    done = sorted((x for x in xfers if "end" in x), key=lambda x: x["ts"])
    for a, b in zip(done, done[1:]):
        if b["ts"] < a["end"]:
            bad.append(f"transfers overlap at {b['ts']:.0f} us (one engine)")
    # The buffer's owner: set by a scrub, or by the first transfer seen. A transfer for another
    # client without a scrub leaks bytes; a scrub for the owner itself is needless.
    owner = None
    for e in events:
        if e["event"] == "edu_scrub":
            to = int(e["f"]["to_client"])
            if owner is not None and to == owner:
                bad.append(f"scrub at {e['ts']:.0f} us for client {to}, which already owns the buffer")
            owner = to
        elif e["event"] == "edu_xfer_start":
            c = int(e["f"]["client"])
            if owner is not None and c != owner:
                bad.append(f"transfer at {e['ts']:.0f} us for client {c} while the buffer holds client {owner}'s bytes")
            owner = c
    return bad


def render(jobs, xfers, scrubs, prefix, runtime=()):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        print("trace-timeline: no matplotlib (scripts/deps.sh installs python3-matplotlib): no picture")
        return []
    times = [x["ts"] for x in xfers] + [j["queued"] for j in jobs.values() if "queued" in j]
    if not times:
        return []
    t0 = min(times)
    ms = lambda us: (us - t0) / 1000.0
    clients = sorted({k[0] for k in jobs})
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    colour = {c: palette[i % len(palette)] for i, c in enumerate(clients)}
    queues = sorted({(k[0], k[1]) for k in jobs})
    # Each traced process's pool: which client it is (device_open), its waiting frees, its reuses.
    client_of = {e["pid"]: int(e["f"]["client"]) for e in runtime if e["event"] == "device_open"}
    frees = trace_runtime.pending_frees(runtime)
    pool_pids = sorted({f["pid"] for f in frees})
    pool_row = {pid: f"pool of client {client_of.get(pid, '?')}\n(process {pid})" for pid in pool_pids}
    rows = (["engine: transfers", "engine: scrubs"] + [f"client {c} queue {q}" for c, q in queues]
            + [pool_row[p] for p in pool_pids])
    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.55 * len(rows)))
    y = {name: len(rows) - 1 - i for i, name in enumerate(rows)}
    # White edges keep back-to-back transfers apart: each is one DMA of at most 4095 bytes.
    ax.broken_barh([(ms(x["ts"]), max(ms(x["end"]) - ms(x["ts"]), 0.01)) for x in xfers if "end" in x],
                   (y["engine: transfers"] - 0.35, 0.7),
                   facecolors=[colour.get(x["key"][0], "grey") for x in xfers if "end" in x],
                   edgecolors="white", linewidth=0.6)
    ax.broken_barh([(ms(s["ts"]), max(ms(s["end"]) - ms(s["ts"]), 0.01)) for s in scrubs if "end" in s],
                   (y["engine: scrubs"] - 0.35, 0.7), facecolors="black")
    for (c, q) in queues:
        row = y[f"client {c} queue {q}"]
        mine = [j for k, j in jobs.items() if (k[0], k[1]) == (c, q) and "queued" in j and "done" in j]
        waiting = [(ms(j["queued"]), max(ms(j.get("start", j["done"])) - ms(j["queued"]), 0.01)) for j in mine]
        running = [(ms(j["start"]), max(ms(j["done"]) - ms(j["start"]), 0.01)) for j in mine if "start" in j]
        ax.broken_barh(waiting, (row - 0.35, 0.7), facecolors="#dddddd", edgecolors="#999999", linewidth=0.5)
        ax.broken_barh(running, (row - 0.25, 0.5), facecolors=colour[c], edgecolors="white", linewidth=0.5)
    for pid in pool_pids:
        row = y[pool_row[pid]]
        mine = sorted((f for f in frees if f["pid"] == pid and "reusable" in f), key=lambda f: f["ts"])
        # Blocks pending at the same time get lanes of their own, so each wait reads as one bar.
        lane_end, lane_of = [], {}
        for f in mine:
            free_lane = next((i for i, end in enumerate(lane_end) if end <= f["ts"]), len(lane_end))
            lane_end[free_lane:free_lane + 1] = [f["reusable"]]
            lane_of[id(f)] = free_lane
        lanes = max(len(lane_end), 1)
        for f in mine:
            lo = row - 0.3 + 0.6 * lane_of[id(f)] / lanes
            ax.broken_barh([(ms(f["ts"]), max(ms(f["reusable"]) - ms(f["ts"]), 0.01))], (lo + 0.03, 0.6 / lanes - 0.06),
                           facecolors="white", edgecolors=colour.get(client_of.get(pid), "grey"), hatch="////",
                           linewidth=0.8)
        again = [e for e in trace_runtime.reuses(runtime) if e["pid"] == pid]
        ax.plot([ms(e["ts"]) for e in again], [row] * len(again), linestyle="none", marker="v", markersize=6,
                color="black")
        # The fence that let each block go: from its job's end to where the pool saw it.
        streams = trace_runtime.stream_queues(runtime)
        for f in mine:
            for stream, point in f["waits"]:
                cq = streams.get((pid, stream))
                j = jobs.get((cq[0], cq[1], point)) if cq else None
                if j and "done" in j and f"client {cq[0]} queue {cq[1]}" in y:
                    ax.annotate("", xy=(ms(f["reusable"]), row + 0.3),
                                xytext=(ms(j["done"]), y[f"client {cq[0]} queue {cq[1]}"] - 0.25),
                                arrowprops={"arrowstyle": "->", "color": "#555555", "linewidth": 0.7})
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(rows)))
    ax.set_xlabel("time since the first job was queued (ms, CLOCK_MONOTONIC: the driver's tracepoints and hostrt's own trace)")
    njobs = sum(1 for j in jobs.values() if "done" in j)
    ax.set_title(f"edu_accel DMA timeline: {njobs} jobs of {len(clients)} clients (open files), "
                 f"{len(xfers)} transfers, {len(scrubs)} scrubs\n"
                 "one DMA engine serves every queue; a client is a process's open file of the device",
                 loc="left", fontsize=10)
    legend = [Patch(facecolor=colour[c], label=f"client {c}: its transfers, and its job while on the engine")
              for c in clients]
    legend += [Patch(facecolor="#dddddd", edgecolor="#999999",
                     label="job submitted, waiting (for its in-syncs, then for the engine)"),
               Patch(facecolor="black", label="scrub: device buffer cleared before another client's job")]
    if pool_pids:
        from matplotlib.lines import Line2D
        legend += [Patch(facecolor="white", edgecolor="grey", hatch="////",
                         label="pool block freed while its copy was queued: held until the pool sees that job done"),
                   Line2D([], [], color="#555555", linewidth=0.7,
                          label="the job whose end made the block reusable"),
                   Line2D([], [], linestyle="none", marker="v", color="black",
                          label="pool hands a cached block out again (reuse)")]
    fig.legend(handles=legend, loc="lower center", ncol=2, fontsize=9, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0.06 + 0.5 / (1.2 + 0.55 * len(rows)), 1, 1))
    paths = []
    for ext in ("png", "svg"):
        fig.savefig(f"{prefix}.{ext}", dpi=110)
        paths.append(f"{prefix}.{ext}")
    plt.close(fig)
    return paths


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    opts = argv[3:]
    check = "--check" in opts
    rt_paths = [a for a in opts if a not in ("--check", "--runtime", "--report")]
    events = parse(argv[1])
    jobs, xfers, scrubs = build(events)
    runtime = trace_runtime.parse(rt_paths)
    doc = to_trace_events(jobs, xfers, scrubs, parse_other(argv[1]), runtime)
    with open(argv[2] + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f)
    paths = [argv[2] + ".json"] + render(jobs, xfers, scrubs, argv[2], runtime)
    print(f"trace-timeline: {len(events)} events, {len(jobs)} jobs, {len(xfers)} transfers, {len(scrubs)} scrubs, "
          f"{len(runtime)} runtime events of {len({e['pid'] for e in runtime})} process(es) -> " + ", ".join(paths))
    if "--report" in opts:
        print(trace_report.report(events, jobs, xfers, runtime, paths))
    if not check:
        return 0
    with open(argv[2] + ".json", encoding="utf-8") as f:
        bad = check_format(json.load(f))
    bad += check_invariants(jobs, xfers, scrubs, events)
    if not jobs or not xfers:
        bad.append("the trace holds no job or no transfer")
    if rt_paths:
        bad += trace_runtime.check(runtime, jobs)
        frees = trace_runtime.pending_frees(runtime)
        if not frees:
            bad.append("the runtime's trace holds no free that waited for a job (nothing to check reuse against)")
    for b in bad[:20]:
        print("trace-timeline: VIOLATION " + b)
    print(f"trace-timeline: {'FAIL' if bad else 'PASS'} {len(bad)} violation(s) in {len(jobs)} jobs, {len(xfers)} transfers, "
          f"{len(trace_runtime.reuses(runtime))} pool reuses")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
