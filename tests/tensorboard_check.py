"""Checks RUN/tb against RUN/metrics.jsonl with the real TensorBoard (tests/tensorboard.sh, tests/recovery.sh).

usage: tensorboard_check.py RUN_DIR [STEPS]   (the run trained steps 1..STEPS, default 6)"""
import glob
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

run = sys.argv[1]
last = int(sys.argv[2]) if len(sys.argv) > 2 else 6
tb = os.path.join(run, "tb")
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


# TFRecord framing, read by hand: TensorBoard's own reader does not check the data CRC.
records = 0
for path in sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*"))):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        header = data[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        body = data[at + 12:at + 12 + n]
        (body_crc,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        if len_crc != masked_crc32c(header) or body_crc != masked_crc32c(body):
            check(False, f"{path}: a record at byte {at} has a wrong CRC")
            break
        event_pb2.Event.FromString(body)  # protobuf's parser accepts every record
        records += 1
        at += 16 + n
check(records > 0, f"{records} records, every CRC and every Event as protobuf parses them")

# What metrics.jsonl says, as TensorBoard should show it.
want = {}
for line in open(os.path.join(run, "metrics.jsonl")):
    j = json.loads(line)
    if j["type"] not in ("step", "eval"):
        continue
    prefix = "train" if j["type"] == "step" else "eval/" + j["model"]

    def flatten(p, o):
        for k, v in o.items():
            if isinstance(v, dict):
                flatten(f"{p}/{k}", v)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and not (p == prefix and k == "step"):
                want.setdefault(f"{p}/{k}", []).append((j["step"], float(np.float32(v))))

    flatten(prefix, j)

acc = EventAccumulator(tb, size_guidance={"scalars": 0})
acc.Reload()
have = acc.Tags()["scalars"]
check(sorted(have) == sorted(want), f"{len(have)} scalar tags, those of metrics.jsonl"
      + ("" if sorted(have) == sorted(want) else f": extra {sorted(set(have) - set(want))}, missing {sorted(set(want) - set(have))}"))
bad = [t for t in want if t in have and [(e.step, e.value) for e in acc.Scalars(t)] != want[t]]
check(not bad, "each tag's (step, value) list equals metrics.jsonl's, the resumed steps once"
      + (f": differ for {bad[:5]}, e.g. {[(e.step, e.value) for e in acc.Scalars(bad[0])]} vs {want[bad[0]]}" if bad else ""))
steps = [s for s, _ in want.get("train/loss", [])]
check(steps == list(range(1, last + 1)), f"train/loss at steps {steps}")

# The real server: fetch the loss curve as the dashboard does.
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", tb, "--host", "127.0.0.1",
                           "--port", str(port), "--load_fast", "false"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
served = None
try:
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=.&tag=train/loss"
    for _ in range(600):  # the server starts, then loads the directory on its own thread
        if server.poll() is not None:
            break
        try:
            served = json.load(urllib.request.urlopen(url, timeout=5))
            if len(served) == last:
                break
        except Exception:
            pass
        time.sleep(0.2)
finally:
    server.terminate()
    server.wait(timeout=30)
got = [(int(s), float(np.float32(v))) for _, s, v in served or []]
check(got == want.get("train/loss"), f"tensorboard --logdir served train/loss over HTTP: {got}")
sys.exit(1 if fails else 0)
