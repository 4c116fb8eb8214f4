#!/usr/bin/env python3
"""A real gRPC client (grpcio, not fedshard's) that greets a round server shard over TLS without a certificate of
its own: the server must refuse it. Prints the status it got. Usage: sites_client.py HOST:PORT CA_PEM"""
import sys

import grpc


def main():
    address, ca = sys.argv[1], open(sys.argv[2], "rb").read()
    channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca))
    hello = channel.unary_unary("/fedshard.sites.v1.RoundServer/Hello")  # raw bytes in and out
    try:
        hello(b"FSR1\x01", timeout=30)
    except grpc.RpcError as e:
        print(f"{e.code().name}: {e.details()}")
        return 0
    print("the server answered a client without a certificate")
    return 1


if __name__ == "__main__":
    sys.exit(main())
