# Per 0.5 s sample of rank 0's sockets (hsdp_comm.sh's NAME.ss): Mbit/s sent (bytes_acked) and received per peer.
import re, sys
samples, t, cur = [], None, None
peer = None
for line in open(sys.argv[1]):
    if line.startswith('t '):
        if cur is not None: samples.append((t, cur))
        t, cur = float(line.split()[1]), {}
    elif line.startswith('ESTAB'):
        peer = line.split()[4].split(':')[0]
    elif 'bytes_' in line and peer:
        a = int(m.group(1)) if (m := re.search(r'bytes_acked:(\d+)', line)) else 0
        r = int(m.group(1)) if (m := re.search(r'bytes_received:(\d+)', line)) else 0
        s = cur.setdefault(peer, [0, 0]); s[0] += a; s[1] += r
if cur is not None: samples.append((t, cur))
peers = ['10.79.0.2', '10.79.0.3', '10.79.0.7']
print('t_s  ' + '  '.join(f'{p[-2:]}:tx {p[-2:]}:rx' for p in peers))
for (t0, a), (t1, b) in zip(samples, samples[1:]):
    row = []
    for p in peers:
        x, y = a.get(p, [0, 0]), b.get(p, [0, 0])
        row += [(y[0] - x[0]) * 8e-6 / (t1 - t0), (y[1] - x[1]) * 8e-6 / (t1 - t0)]
    print(f'{t1 - samples[0][0]:5.1f} ' + ' '.join(f'{v:7.1f}' for v in row))
