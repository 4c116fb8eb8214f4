"""Task B control: is a 2-rank exchange over one TCP connection slow in the kernel, or in Open MPI?
Both ends send N MiB and receive N MiB at once (one thread each way), over one connection or over two
(one per direction). Usage: tcp_bidir.py server PORT | tcp_bidir.py client HOST PORT MIB CONNS"""
import socket, sys, threading, time

def pump(sock, n, out):
    buf = bytearray(1 << 20)
    t0 = time.time()
    left = n
    while left:
        left -= sock.send(memoryview(buf)[:min(left, len(buf))])
    out.append(time.time() - t0)

def drain(sock, n, out):
    buf = bytearray(1 << 20)
    t0 = time.time()
    left = n
    while left:
        k = sock.recv_into(buf, min(left, len(buf)))
        assert k, "peer closed"
        left -= k
    out.append(time.time() - t0)

def exchange(send_sock, recv_sock, n):
    out_s, out_r = [], []
    ts = [threading.Thread(target=pump, args=(send_sock, n, out_s)), threading.Thread(target=drain, args=(recv_sock, n, out_r))]
    for t in ts: t.start()
    for t in ts: t.join()
    return out_s[0], out_r[0]

if sys.argv[1] == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", int(sys.argv[2]))); ls.listen(2)
    a, _ = ls.accept()
    hdr = a.recv(64).decode().split()
    mib, conns = int(hdr[0]), int(hdr[1])
    b = ls.accept()[0] if conns == 2 else a
    a.send(b"go".ljust(64))
    exchange(a, b, mib << 20)
else:
    host, port, mib, conns = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    a = socket.create_connection((host, port)); a.send(f"{mib} {conns}".ljust(64).encode())
    b = socket.create_connection((host, port)) if conns == 2 else a
    a.recv(64)
    s, r = exchange(b if conns == 2 else a, a, mib << 20)  # with 2: send on the second, receive on the first
    print(f"conns={conns} MiB={mib} send {s:.2f}s ({mib*8.389/s:.1f} Mbit/s) recv {r:.2f}s ({mib*8.389/r:.1f} Mbit/s)")
