// The round server's gRPC service (`fedshard serve`): every call's peer checked against the federation's CA
// (sites/tls.h), its messages parsed (sites/wire.h) and handed to the shard (sites/shard.h), or for the shards'
// reports, to the coordinator, which only the server's own certificate may reach. A refusal is one line on the
// server and the gRPC status the site prints.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <string>

#include "sites/coordinator.h"
#include "sites/shard.h"
#include "sites/tls.h"

namespace fedshard::sites {

class RoundService : public grpc::Service {
 public:
  // `coordinator`: shard 0's (the others refuse reports); reports come from the shards' own certificate's name.
  // `crl_path`: the CA's revocation list, read again when it changes ("": none).
  RoundService(Shard& shard, const TlsMaterial& tls, Coordinator* coordinator, std::string label,
               const std::string& crl_path = "");

 private:
  grpc::Status hello(grpc::ServerContext* ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out);
  grpc::Status submit(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* in, grpc::ByteBuffer* out);
  grpc::Status fetch(grpc::ServerContext* ctx, const grpc::ByteBuffer* in, grpc::ServerWriter<grpc::ByteBuffer>* out);
  grpc::Status leave(grpc::ServerContext* ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out);
  grpc::Status attend(grpc::ServerContext* ctx, const grpc::ByteBuffer* in, grpc::ServerWriter<grpc::ByteBuffer>* out);
  grpc::Status report(grpc::ServerContext* ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out);
  // Runs `call` for a verified peer (its name), turning refusals, malformed messages and errors into a status and
  // one line on stderr.
  grpc::Status guarded(grpc::ServerContext* ctx, const char* what, const std::function<void(const std::string&)>& call);

  Shard& shard_;
  PeerVerifier verifier_;
  std::string server_name_;
  Coordinator* coordinator_;
  std::string label_;  // "shard i/M", for lines
};

}  // namespace fedshard::sites
