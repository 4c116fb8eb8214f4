// What the sites' client and the round server share of gRPC: the methods of the service (each message a raw byte
// buffer: sites/wire.h), the conversion of messages to and from byte buffers, the TLS credentials and the channel
// settings (keepalive, reconnection backoff, message sizes). gRPC reads the usual proxy settings (https_proxy,
// grpc_proxy, no_grpc_proxy) where compute nodes reach the outside through a proxy (docs/sites.md).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "sites/tls.h"

namespace fedshard::sites {

constexpr const char* kHelloMethod = "/fedshard.sites.v1.RoundServer/Hello";
constexpr const char* kSubmitMethod = "/fedshard.sites.v1.RoundServer/Submit";
constexpr const char* kFetchMethod = "/fedshard.sites.v1.RoundServer/Fetch";
constexpr const char* kLeaveMethod = "/fedshard.sites.v1.RoundServer/Leave";
constexpr const char* kReportMethod = "/fedshard.sites.v1.RoundServer/Report";
constexpr const char* kAttendMethod = "/fedshard.sites.v1.RoundServer/Attend";

grpc::ByteBuffer to_buffer(const std::string& bytes);
std::string from_buffer(const grpc::ByteBuffer& buffer);

// A channel to `address` (HOST:PORT) with this party's certificate, checking the server's against the CA;
// `server_name`: the name the server's certificate must carry (empty: HOST).
std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const TlsMaterial& tls,
                                            const std::string& server_name = "");
// The server's credentials: its certificate, and every peer's asked for (and checked by the service itself).
std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsMaterial& tls);
// Keepalive and message sizes for a server builder.
void configure_server(grpc::ServerBuilder& b);

// The peer's certificate as the TLS handshake presented it (PEM; empty: none).
std::string peer_certificate(const grpc::ServerContext& ctx);

}  // namespace fedshard::sites
