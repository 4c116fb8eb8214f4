#!/usr/bin/env python3
"""A hostile site, written from docs/sites.md's protocol with grpcio (not fedshard's code): it holds a certificate of
the federation's CA and sends a round server shard every bad message of issue 63's list, one after the other,
against a fresh shard of its own (no other site, so every round is where the probe put it). Prints one line per
case: its name, then the gRPC status the shard answered with. The caller compares each with what it must be.

Usage: sites_probe.py HOST:PORT CA_PEM CERT_PEM KEY_PEM SITE_NAME
"""
import json
import struct
import sys
import time

import grpc

MAGIC = b"FSR1"
HELLO, HELLO_REPLY, SUBMIT_HEADER, CHUNK, SUBMIT_REPLY, FETCH_REQUEST, FETCH_HEADER, ATTEND = 1, 2, 3, 4, 5, 6, 7, 12
MODEL, DELTA = 1, 2
ELEMENTS = 1000  # the probe's model: 1000 float32 elements
JOB, SECOND_JOB = 0x5EC0DE, 0xD0C0DE  # sessions: the probe's job, and a second job under its name


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def s(text):
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<I", len(raw)) + raw


def hello(identity, site, session=JOB):
    return (MAGIC + bytes([HELLO]) + struct.pack("<IQ", 2, session) + s(json.dumps(identity)) + s(site)
            + struct.pack("<II", 0, 1))


def hello_v1(identity, site):  # an older fedshard's: version 1 had no session
    return MAGIC + bytes([HELLO]) + struct.pack("<I", 1) + s(json.dumps(identity)) + s(site) + struct.pack("<II", 0, 1)


def header(round_, site, begin, end, payload=MODEL, tokens=100.0, session=JOB):
    return (MAGIC + bytes([SUBMIT_HEADER]) + struct.pack("<q", round_) + s(site) + struct.pack("<QI", session, 0)
            + bytes([payload]) + struct.pack("<dqq", tokens, begin, end))


def chunk(offset, values, crc=None, count=None):
    payload = struct.pack(f"<{len(values)}f", *values) if isinstance(values, list) else values
    n = count if count is not None else len(payload) // 4
    return (MAGIC + bytes([CHUNK]) + struct.pack("<qqI", offset, n, crc32c(payload) if crc is None else crc)
            + s(payload))


def fetch_request(round_, site, begin, end, have=-1, session=JOB):
    return (MAGIC + bytes([FETCH_REQUEST]) + struct.pack("<qq", round_, have) + s(site)
            + struct.pack("<QIqq", session, 0, begin, end))


def attend(site, session):
    return MAGIC + bytes([ATTEND]) + s(site) + struct.pack("<QI", session, 0)


class Probe:
    def __init__(self, address, ca, cert, key, site):
        creds = grpc.ssl_channel_credentials(open(ca, "rb").read(), open(key, "rb").read(), open(cert, "rb").read())
        self.channel = grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        self.site = site
        self._hello = self.channel.unary_unary("/fedshard.sites.v1.RoundServer/Hello")
        self._submit = self.channel.stream_unary("/fedshard.sites.v1.RoundServer/Submit")
        self._fetch = self.channel.unary_stream("/fedshard.sites.v1.RoundServer/Fetch")
        self._attend = self.channel.unary_stream("/fedshard.sites.v1.RoundServer/Attend")

    def case(self, name, call):
        try:
            call()
            print(f"{name}: OK")
        except grpc.RpcError as e:
            print(f"{name}: {e.code().name}: {e.details()}")
        sys.stdout.flush()

    def hello(self, message):
        return self._hello(message, timeout=30)

    def submit(self, messages):
        return self._submit(iter(messages), timeout=30)

    def fetch(self, round_):
        return list(self._fetch(fetch_request(round_, self.site, 0, ELEMENTS), timeout=60))

    def attend(self, session):
        """Opens an Attend call and returns it once the shard counts it (its first message)."""
        call = self._attend(attend(self.site, session), timeout=120)
        next(call)
        return call

    def hello_once_free(self, message, seconds=30):
        """The hello, tried again while the shard says another job holds the name, for up to `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                return self.hello(message)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.ALREADY_EXISTS or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def main():
    address, ca, cert, key, site = sys.argv[1:6]
    p = Probe(address, ca, cert, key, site)
    identity = {"model": "probe: 1000 elements", "tokenizer": "probe", "codec": "none", "block": 0, "values": "",
                "total": ELEMENTS}
    other = dict(identity, tokenizer="another tokenizer")
    ones = [1.0] * ELEMENTS
    p.case("protocol version 1", lambda: p.hello(hello_v1(identity, site)))
    p.case("a hello naming another site", lambda: p.hello(hello(identity, "someone-else")))
    p.case("a malformed identity", lambda: p.hello(MAGIC + bytes([HELLO]) + struct.pack("<IQ", 2, JOB)
                                                   + s("{not json") + s(site) + struct.pack("<II", 0, 1)))
    p.case("random bytes as a hello", lambda: p.hello(b"\x17\x03\x03garbage that is not a message"))
    p.case("the first hello pins the federation", lambda: p.hello(hello(identity, site)))
    p.case("another federation identity", lambda: p.hello(hello(other, site)))
    # Round 0: the probe's own initial model, whole; it commits (the probe is the only site), round 1 opens.
    p.case("round 0, a whole model", lambda: p.submit([header(0, site, 0, ELEMENTS), chunk(0, ones)]))
    p.case("round 0 committed", lambda: p.fetch(0))
    p.case("a replay of round 0", lambda: p.submit([header(0, site, 0, ELEMENTS), chunk(0, ones)]))
    p.case("a round from the future", lambda: p.submit([header(5, site, 0, ELEMENTS), chunk(0, ones)]))
    p.case("a submission for another site", lambda: p.submit([header(1, "someone-else", 0, ELEMENTS), chunk(0, ones)]))
    p.case("a delta where the round takes models", lambda: p.submit([header(1, site, 0, ELEMENTS, DELTA), chunk(0, ones)]))
    p.case("elements beyond the shard's", lambda: p.submit([header(1, site, 0, ELEMENTS + 1), chunk(0, ones)]))
    p.case("a chunk of the wrong length", lambda: p.submit([header(1, site, 0, ELEMENTS),
                                                            chunk(0, b"\0" * (4 * ELEMENTS - 2), count=ELEMENTS)]))
    p.case("a chunk outside its submission", lambda: p.submit([header(1, site, 0, 500), chunk(400, [0.5] * 200)]))
    p.case("a NaN", lambda: p.submit([header(1, site, 0, ELEMENTS), chunk(0, [float("nan")] + ones[1:])]))
    p.case("an infinity", lambda: p.submit([header(1, site, 0, ELEMENTS), chunk(0, ones[1:] + [float("inf")])]))
    p.case("a chunk whose checksum fails", lambda: p.submit([header(1, site, 0, ELEMENTS), chunk(0, ones, crc=12345)]))
    p.case("a stream cut in the middle", lambda: p.submit([header(1, site, 0, ELEMENTS), chunk(0, ones[:400])]))
    p.case("a message larger than a chunk may be", lambda: p.submit([header(1, site, 0, ELEMENTS),
                                                                      chunk(0, b"\0" * (5 << 20), 0, 5 << 18)]))
    p.case("trailing bytes after a header", lambda: p.submit([header(1, site, 0, ELEMENTS) + b"\0", chunk(0, ones)]))
    p.case("an empty submission", lambda: p.submit([]))
    # Nothing above reached the model: round 1 is still open, and the global model is the probe's round 0.
    p.case("a valid round 1 after all that", lambda: p.submit([header(1, site, 0, ELEMENTS), chunk(0, [2.0] * ELEMENTS)]))
    got = p.fetch(1)
    values = struct.unpack(f"<{ELEMENTS}f", got[1][4 + 1 + 16 + 4 + 4:]) if len(got) == 2 else ()
    print(f"round 1's global model: {sorted(set(values))}")
    sys.stdout.flush()
    # Two jobs under one certificate: while the probe's job holds an Attend call open, another session is refused;
    # once that call ends (the job gone), the other job takes the name, and the first one is then refused.
    first = p.attend(JOB)
    print("the site's job attends: OK")
    p.case("a second job's hello under a connected site's name", lambda: p.hello(hello(identity, site, SECOND_JOB)))
    p.case("a second job's submission", lambda: p.submit([header(2, site, 0, ELEMENTS, session=SECOND_JOB),
                                                         chunk(0, ones)]))
    first.cancel()
    p.case("the second job once the first has gone", lambda: p.hello_once_free(hello(identity, site, SECOND_JOB)))
    second = p.attend(SECOND_JOB)
    p.case("the first job's fetch after the second took the name", lambda: p.fetch(2))
    second.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main())
