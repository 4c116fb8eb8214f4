#!/usr/bin/env python3
"""A real gRPC client (grpcio, not fedshard's) that knocks on a round server shard. Prints what it got.

sites_client.py HOST:PORT CA_PEM [CERT_PEM KEY_PEM]
    greets the shard over TLS with a malformed hello, without a certificate of its own or with the one given: the
    server must refuse it (UNAUTHENTICATED without one, or with a revoked one; INVALID_ARGUMENT where the certificate
    passed and the hello did not). Prints the status's code and details.
sites_client.py --random-bytes HOST:PORT
    sends 64 KiB of random bytes over plain TCP where the TLS handshake is expected; prints how the server ended it.
"""
import os
import socket
import sys

import grpc


def hello(address, ca, cert=None, key=None):
    creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read(),
                                         private_key=open(key, "rb").read() if key else None,
                                         certificate_chain=open(cert, "rb").read() if cert else None)
    channel = grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", "localhost")])
    call = channel.unary_unary("/fedshard.sites.v1.RoundServer/Hello")  # raw bytes in and out
    try:
        call(b"FSR1\x01", timeout=30)
    except grpc.RpcError as e:
        print(f"{e.code().name}: {e.details()}")
        return 0
    print("the server answered a malformed hello")
    return 1


def random_bytes(address):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        sent = 0
        try:
            for _ in range(64):
                s.sendall(os.urandom(1024))
                sent += 1024
            s.shutdown(socket.SHUT_WR)
            got = s.recv(65536)
            while got and len(got) < 1 << 20:
                more = s.recv(65536)
                if not more:
                    break
                got += more
            print(f"the server closed the connection after {sent} bytes sent")
        except (ConnectionResetError, BrokenPipeError):
            print(f"the server reset the connection after {sent} bytes sent")
    return 0


def main():
    if sys.argv[1] == "--random-bytes":
        return random_bytes(sys.argv[2])
    return hello(*sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
