import re, sys
# Per sample: for each BTL connection (peer port 1024 or local 1024) print key TCP fields.
ts = None; ns = "?"
lines = open(sys.argv[1]).read().split('\n')
keys = ['rtt', 'cwnd', 'bytes_acked', 'bytes_received', 'retrans', 'delivery_rate', 'bbr_bw', 'rwnd_limited', 'sndbuf_limited', 'snd_wnd', 'rcv_space', 'unacked', 'notsent']
t0 = None
for i, l in enumerate(lines):
    if re.match(r'^\d{10}\.\d+$', l):
        ts = float(l); t0 = t0 or ts
    if re.match(r'^ns\d$', l): ns = l
    m = re.match(r'^(\d+)\s+(\d+)\s+(10\.7[78]\.0\.\d+:\d+)\s+(10\.7[78]\.0\.\d+:\d+)', l)
    if m and '.254' not in l and i + 1 < len(lines):
        d = lines[i + 1]
        f = {}
        for k, pat in [('rtt', r'rtt:([\d.]+)'), ('cwnd', r'cwnd:(\d+)'), ('acked', r'bytes_acked:(\d+)'), ('rcvd', r'bytes_received:(\d+)'),
                       ('retr', r'retrans:([\d/]+)'), ('dlv', r'delivery_rate (\d+)'), ('bbrbw', r'bbr:\(bw:(\d+)'), ('rwndlim', r'rwnd_limited:(\S+)'),
                       ('sndbuflim', r'sndbuf_limited:(\S+)'), ('snd_wnd', r'snd_wnd:(\d+)'), ('unacked', r'unacked:(\d+)'), ('notsent', r'notsent:(\d+)')]:
            mm = re.search(pat, d)
            f[k] = mm.group(1) if mm else '-'
        for k in ('dlv', 'bbrbw'):
            if f[k] != '-': f[k] = f'{int(f[k])/1e6:.0f}M'
        print(f"{ts-t0:6.2f} {ns} recvQ={m.group(1):>7} sendQ={m.group(2):>8} {m.group(3)}->{m.group(4)} " + ' '.join(f'{k}={v}' for k, v in f.items()))
