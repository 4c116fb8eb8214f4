#include "sites/service.h"

#include <grpcpp/impl/codegen/method_handler.h>
#include <grpcpp/impl/codegen/rpc_service_method.h>

#include <cstdio>

#include "sites/rpc.h"
#include "sites/wire.h"
#include "util/error.h"

namespace fedshard::sites {

namespace {

using grpc::ByteBuffer;
using grpc::internal::RpcMethod;
using grpc::internal::RpcServiceMethod;

}  // namespace

RoundService::RoundService(Shard& shard, const TlsMaterial& tls, Coordinator* coordinator, std::string label,
                           const std::string& crl_path)
    : shard_(shard), verifier_(tls.ca_pem, crl_path), server_name_(tls.name), coordinator_(coordinator), label_(std::move(label)) {
  AddMethod(new RpcServiceMethod(kHelloMethod, RpcMethod::NORMAL_RPC,
                                 new grpc::internal::RpcMethodHandler<RoundService, ByteBuffer, ByteBuffer>(
                                     &RoundService::hello, this)));
  AddMethod(new RpcServiceMethod(kSubmitMethod, RpcMethod::CLIENT_STREAMING,
                                 new grpc::internal::ClientStreamingHandler<RoundService, ByteBuffer, ByteBuffer>(
                                     &RoundService::submit, this)));
  AddMethod(new RpcServiceMethod(kFetchMethod, RpcMethod::SERVER_STREAMING,
                                 new grpc::internal::ServerStreamingHandler<RoundService, ByteBuffer, ByteBuffer>(
                                     &RoundService::fetch, this)));
  AddMethod(new RpcServiceMethod(kLeaveMethod, RpcMethod::NORMAL_RPC,
                                 new grpc::internal::RpcMethodHandler<RoundService, ByteBuffer, ByteBuffer>(
                                     &RoundService::leave, this)));
  AddMethod(new RpcServiceMethod(kReportMethod, RpcMethod::NORMAL_RPC,
                                 new grpc::internal::RpcMethodHandler<RoundService, ByteBuffer, ByteBuffer>(
                                     &RoundService::report, this)));
  AddMethod(new RpcServiceMethod(kAttendMethod, RpcMethod::SERVER_STREAMING,
                                 new grpc::internal::ServerStreamingHandler<RoundService, ByteBuffer, ByteBuffer>(
                                     &RoundService::attend, this)));
}

grpc::Status RoundService::guarded(grpc::ServerContext* ctx, const char* what,
                                   const std::function<void(const std::string&)>& call) {
  std::string peer = "?";
  auto refused = [&](grpc::StatusCode code, const std::string& why) {
    std::fprintf(stderr, "fedshard serve: %s: refused %s from %s (%s): %s\n", label_.c_str(), what, peer.c_str(),
                 ctx->peer().c_str(), why.c_str());
    return grpc::Status(code, why);
  };
  try {
    peer = verifier_.verify(peer_certificate(*ctx));
  } catch (const Error& e) {
    return refused(grpc::UNAUTHENTICATED, e.what());
  }
  try {
    call(peer);
    return grpc::Status::OK;
  } catch (const Refusal& r) {
    return refused(static_cast<grpc::StatusCode>(r.code), r.message);
  } catch (const WireError& e) {
    return refused(grpc::INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return refused(grpc::INTERNAL, e.what());
  }
}

grpc::Status RoundService::hello(grpc::ServerContext* ctx, const ByteBuffer* in, ByteBuffer* out) {
  return guarded(ctx, "a hello", [&](const std::string& peer) {
    *out = to_buffer(encode(shard_.hello(parse_hello(from_buffer(*in)), peer)));
  });
}

grpc::Status RoundService::submit(grpc::ServerContext* ctx, grpc::ServerReader<ByteBuffer>* in, ByteBuffer* out) {
  return guarded(ctx, "a submission", [&](const std::string& peer) {
    ByteBuffer b;
    if (!in->Read(&b)) throw Refusal{grpc::INVALID_ARGUMENT, "an empty submission"};
    const auto header = parse_submit_header(from_buffer(b));
    const auto next = [&](Chunk& c) {
      if (!in->Read(&b)) return false;
      c = parse_chunk(from_buffer(b));
      return true;
    };
    *out = to_buffer(encode(shard_.submit(header, peer, next)));
  });
}

grpc::Status RoundService::fetch(grpc::ServerContext* ctx, const ByteBuffer* in, grpc::ServerWriter<ByteBuffer>* out) {
  return guarded(ctx, "a fetch", [&](const std::string& peer) {
    shard_.fetch(parse_fetch_request(from_buffer(*in)), peer, [&] { return ctx->IsCancelled(); },
                 [&](const std::string& bytes) { return out->Write(to_buffer(bytes)); });
  });
}

grpc::Status RoundService::leave(grpc::ServerContext* ctx, const ByteBuffer* in, ByteBuffer* out) {
  return guarded(ctx, "a leave", [&](const std::string& peer) {
    *out = to_buffer(encode(shard_.leave(parse_leave(from_buffer(*in)), peer)));
  });
}

grpc::Status RoundService::attend(grpc::ServerContext* ctx, const ByteBuffer* in, grpc::ServerWriter<ByteBuffer>* out) {
  return guarded(ctx, "an attend", [&](const std::string& peer) {
    shard_.attend(parse_attend(from_buffer(*in)), peer, [&] { return ctx->IsCancelled(); },
                  [&](const std::string& bytes) { return out->Write(to_buffer(bytes)); });
  });
}

grpc::Status RoundService::report(grpc::ServerContext* ctx, const ByteBuffer* in, ByteBuffer* out) {
  return guarded(ctx, "a report", [&](const std::string& peer) {
    if (peer != server_name_)
      throw Refusal{grpc::PERMISSION_DENIED, cat("'", peer, "' is not the round server ('", server_name_,
                                                 "'): only its shards report")};
    if (!coordinator_) throw Refusal{grpc::FAILED_PRECONDITION, "reports go to shard 0"};
    *out = to_buffer(encode(coordinator_->report(parse_report(from_buffer(*in)))));
  });
}

}  // namespace fedshard::sites
