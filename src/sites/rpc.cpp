#include "sites/rpc.h"

#include <cstdlib>

#include "sites/wire.h"

namespace fedshard::sites {

namespace {

constexpr int kMaxMessage = static_cast<int>(kMaxPayload) + (1 << 16);  // a chunk and its fields

// gRPC 1.51 loses a connection's socket events when that connection was first tried while the server was down (a
// shard restarting: grpc/grpc#28866) and then moves its TLS handshake on only from a backup poller, every 5 s by
// default: a handshake of a few round trips took 10-30 s, past the 20 s one connection attempt may take, and a
// restarted shard stayed out of the sites' reach for 30-45 s in about half of the runs (tests/sites.sh under load,
// tests/sites_chaos.py). Every 100 ms costs a few wake-ups a second. gRPC reads it once, when it starts: so before
// the first gRPC object; a value already in the environment is kept.
void poll_often() { setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", /*overwrite=*/0); }

}  // namespace

grpc::ByteBuffer to_buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string from_buffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  out.reserve(buffer.Length());
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const TlsMaterial& tls,
                                            const std::string& server_name) {
  poll_often();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca_pem;
  o.pem_private_key = tls.key_pem;
  o.pem_cert_chain = tls.cert_pem;
  grpc::ChannelArguments args;
  if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  args.SetMaxReceiveMessageSize(kMaxMessage);
  args.SetMaxSendMessageSize(kMaxMessage);
  // A long fetch waits for a round: pings find a dead link where no data flows.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A shard started again is found within 0.2 s doubling to 5 s. (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS stays at its
  // 20 s: it is also how long one connection attempt may take, and at 200 ms no handshake across a 100 ms round trip
  // ever completed; bench/sites.sh found it.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsMaterial& tls) {
  poll_often();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  o.pem_root_certs = tls.ca_pem;
  o.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(o);
}

void configure_server(grpc::ServerBuilder& b) {
  b.SetMaxReceiveMessageSize(kMaxMessage);
  b.SetMaxSendMessageSize(kMaxMessage);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
}

std::string peer_certificate(const grpc::ServerContext& ctx) {
  const auto auth = ctx.auth_context();
  if (!auth) return "";
  const auto pem = auth->FindPropertyValues("x509_pem_cert");
  return pem.empty() ? "" : std::string(pem.front().data(), pem.front().size());
}

}  // namespace fedshard::sites
