#!/usr/bin/env python3
"""Host side of QEMU hot-unplug for the test VM (run-vm.sh starts it when HOTPLUG=on).

The guest cannot reach QEMU's monitor, so it asks through the shared output directory:
it writes OUT/hotplug/req-NAME (via req-NAME.tmp and a rename, so a request is never read
half-written) holding one line,
    del BDF      device_del of the device the guest sees at PCI address BDF (0000:01:00.0)
    add ID       device_add of a device this agent deleted before, as it was (driver, bus,
                 id, properties)
and this agent answers in OUT/hotplug/rep-NAME (same rename dance): "ok ID" or "error TEXT".
A `del` answers only after QEMU's DEVICE_DELETED event, that is once the guest's acpiphp
ejected the device from its slot.

It never hangs a run: every QMP exchange and event wait has a wall-clock limit (guest
timeouts count guest time, which icount lets race ahead of the host's clock, so the limits
that matter live here), it exits when QEMU's monitor closes or its parent goes away, and a
crash is reported to the guest in OUT/hotplug/agent-error.

usage: hotplug-agent.py QMP_SOCKET OUT_HOTPLUG_DIR DEVICES_JSON
DEVICES_JSON: {"edu0": {"driver": "edu", "bus": "rp0", ...}, ...}: how each device was
added on QEMU's command line, so `add` can recreate it exactly. A string value "0x..." is
sent as a number (a 64-bit dma_mask does not survive the shell's signed arithmetic).
"""
import json
import os
import select
import socket
import sys
import time
import traceback

CONNECT_S = 120  # QEMU creates the socket shortly after it starts
COMMAND_S = 60  # one QMP command's reply
DELETED_S = 300  # device_del until DEVICE_DELETED: a few s on the debug kernel under TCG


def log(msg):
    print(f"hotplug-agent {time.strftime('%H:%M:%S')}: {msg}", flush=True)


class Gone(Exception):
    """QEMU's monitor closed: the VM is over."""


class Qmp:
    def __init__(self, path, parent):
        self.parent = parent
        end = time.monotonic() + CONNECT_S
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                self.check_parent()
                if time.monotonic() > end:
                    raise RuntimeError(f"no QMP socket at {path} after {CONNECT_S} s")
                time.sleep(0.2)
        self.buf = b""
        self.events = []
        greeting = self.read(COMMAND_S)
        if "QMP" not in greeting:
            raise RuntimeError(f"unexpected QMP greeting {greeting}")
        self.command("qmp_capabilities")

    def check_parent(self):
        if os.getppid() != self.parent:
            raise Gone("run-vm.sh went away")

    def read(self, timeout):
        """The next JSON message, or None after timeout seconds."""
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], min(left, 1.0))
            self.check_parent()
            if ready:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise Gone("QMP socket closed")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def command(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        end = time.monotonic() + COMMAND_S
        while True:
            m = self.read(max(0.0, end - time.monotonic()))
            if m is None:
                raise RuntimeError(f"{name}: no reply in {COMMAND_S} s")
            if "event" in m:
                self.events.append(m)
            elif "error" in m:
                raise RuntimeError(f"{name}: {m['error'].get('desc', m['error'])}")
            elif "return" in m:
                return m["return"]

    def wait_event(self, name, device, timeout):
        end = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e["event"] == name and e.get("data", {}).get("device") == device:
                    del self.events[i]
                    return True
            m = self.read(max(0.0, end - time.monotonic()))
            if m is None:
                return False
            if "event" in m:
                self.events.append(m)


def qdev_id_at(qmp, bdf):
    """The QEMU id of the device the guest numbers BDF (bus numbers are the guest's)."""
    try:
        dom, bus, devfn = bdf.split(":")
        slot, fn = devfn.split(".")
        want = (int(bus, 16), int(slot, 16), int(fn, 16))
    except ValueError:
        raise RuntimeError(f"bad PCI address {bdf!r}")

    def walk(devices):
        for d in devices:
            if (d["bus"], d["slot"], d["function"]) == want:
                return d.get("qdev_id") or None
            found = walk(d.get("pci_bridge", {}).get("devices", []))
            if found:
                return found
        return None

    for bus in qmp.command("query-pci"):
        found = walk(bus["devices"])
        if found:
            return found
    raise RuntimeError(f"no QEMU device with an id at {bdf}")


def handle(qmp, devices, deleted, line):
    words = line.split()
    if len(words) != 2 or words[0] not in ("del", "add"):
        raise RuntimeError(f"bad request {line!r}")
    if words[0] == "del":
        dev = qdev_id_at(qmp, words[1])
        if dev not in devices:
            raise RuntimeError(f"{words[1]} is {dev}, not a hot-pluggable device of this run")
        qmp.command("device_del", id=dev)
        if not qmp.wait_event("DEVICE_DELETED", dev, DELETED_S):
            raise RuntimeError(f"device_del {dev}: no DEVICE_DELETED in {DELETED_S} s "
                               "(the guest did not release the slot)")
        deleted.add(dev)
        return dev
    dev = words[1]
    if dev not in deleted:
        raise RuntimeError(f"add {dev}: not deleted by this agent")
    qmp.command("device_add", **devices[dev])
    deleted.discard(dev)
    return dev


def reply(reqdir, name, text):
    tmp = os.path.join(reqdir, f"rep-{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.rename(tmp, os.path.join(reqdir, f"rep-{name}"))


def main():
    sock, reqdir, devices_json = sys.argv[1:4]
    devices = {
        dev: {k: int(v, 16) if isinstance(v, str) and v.startswith("0x") else v for k, v in props.items()}
        for dev, props in json.loads(devices_json).items()
    }
    parent = os.getppid()
    try:
        qmp = Qmp(sock, parent)
        log(f"connected; devices {', '.join(sorted(devices))}")
        open(os.path.join(reqdir, "agent-ready"), "w").close()
        deleted, done = set(), set()
        while True:
            for f in sorted(os.listdir(reqdir)):
                if not f.startswith("req-") or f.endswith(".tmp") or f in done:
                    continue
                done.add(f)
                name = f[4:]
                with open(os.path.join(reqdir, f)) as r:
                    line = r.read().strip()
                t0 = time.monotonic()
                try:
                    text = "ok " + handle(qmp, devices, deleted, line)
                except RuntimeError as e:
                    text = f"error {e}"
                log(f"{name}: {line} -> {text} ({time.monotonic() - t0:.1f} s)")
                reply(reqdir, name, text)
            # Drain events so the socket never fills while the guest is quiet.
            m = qmp.read(0.1)
            if m is not None and "event" in m:
                qmp.events.append(m)
                del qmp.events[:-64]
    except Gone as e:
        log(f"exiting: {e}")
    except Exception:
        err = traceback.format_exc()
        log(err)
        try:
            with open(os.path.join(reqdir, "agent-error"), "w") as f:
                f.write(err)
        except OSError:
            pass
        sys.exit(1)


if __name__ == "__main__":
    main()
