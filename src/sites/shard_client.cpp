#include "sites/shard_client.h"

#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <thread>

#include "sites/rpc.h"
#include "util/error.h"

namespace fedshard::sites {

namespace {

using grpc::ByteBuffer;
using grpc::internal::RpcMethod;
using Clock = std::chrono::steady_clock;

// A failure to reach the shard, or a call the link cut: tried again. (gRPC reports a broken stream as UNAVAILABLE,
// and at times as UNKNOWN or INTERNAL with the transport's words.)
bool transient(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::UNAVAILABLE:
    case grpc::DEADLINE_EXCEEDED:
    case grpc::UNKNOWN:
    case grpc::INTERNAL:
    case grpc::CANCELLED:
      return true;
    default:
      return false;
  }
}

// The server's certificate did not verify: no retry helps.
bool handshake_refused(const grpc::Status& s) {
  const auto& m = s.error_message();
  return s.error_code() == grpc::UNAVAILABLE &&
         (m.find("CERTIFICATE_VERIFY_FAILED") != std::string::npos || m.find("certificate verify failed") != std::string::npos ||
          m.find("Peer name") != std::string::npos);
}

// How long a hello waits for another job's hold on the site's name to end: keepalive (10 s of pings, 10 s for the
// answer) ends a dead predecessor's calls within about 20 s, and the name is free a few seconds after.
constexpr double kHeldPatience = 60;

}  // namespace

ShardClient::ShardClient(std::string address, const TlsMaterial& tls, const std::string& server_name, double patience)
    : address_(std::move(address)), channel_(make_channel(address_, tls, server_name)), patience_(patience) {}

ShardClient::~ShardClient() { stop_attending(); }

void ShardClient::fail(const char* what, const grpc::Status& s) const {
  if (handshake_refused(s))
    throw Error(cat("the round server at ", address_, " was refused: its certificate does not verify against the "
                    "federation's CA (--tls-ca) or does not name the host (", s.error_message(), ")"));
  if (transient(s))
    throw Error(cat("the round server at ", address_, " did not answer ", what, " for ", patience_, " s (",
                    s.error_message(), ")"));
  throw Error(cat("the round server at ", address_, " refused ", what, ": ", s.error_message()));
}

grpc::Status ShardClient::with_retries(const char* what,
                                        const std::function<grpc::Status(grpc::ClientContext&)>& call) {
  const auto started = Clock::now();
  const auto give_up = started + std::chrono::duration<double>(patience_);
  double backoff = 0.2;
  for (;;) {
    grpc::ClientContext ctx;
    auto s = call(ctx);
    const bool held = s.error_code() == grpc::ALREADY_EXISTS &&
                      Clock::now() - started < std::chrono::duration<double>(std::min(patience_, kHeldPatience));
    if (s.ok() || (!transient(s) && !held) || handshake_refused(s) ||
        Clock::now() + std::chrono::duration<double>(backoff) > give_up) {
      if (!s.ok() && s.error_code() != grpc::ABORTED) fail(what, s);
      return s;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 5.0);
  }
}

HelloReply ShardClient::hello(const Hello& h) {
  ByteBuffer out;
  with_retries("a hello", [&](grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const RpcMethod m(kHelloMethod, RpcMethod::NORMAL_RPC, channel_);
    return grpc::internal::BlockingUnaryCall<ByteBuffer, ByteBuffer>(channel_.get(), m, &ctx, to_buffer(encode(h)), &out);
  });
  return parse_hello_reply(from_buffer(out));
}

void ShardClient::once(const char* what, const std::function<grpc::Status(grpc::ClientContext&)>& call) {
  grpc::ClientContext ctx;
  const auto s = call(ctx);
  if (s.ok()) return;
  if (s.error_code() == grpc::ABORTED) throw RoundMoved{s.error_message()};
  if (transient(s) && !handshake_refused(s)) throw Disconnected{s.error_message()};
  fail(what, s);
}

SubmitReply ShardClient::submit(const SubmitHeader& h, const std::vector<Chunk>& chunks) {
  ByteBuffer out;
  once("a submission", [&](grpc::ClientContext& ctx) {
    const RpcMethod m(kSubmitMethod, RpcMethod::CLIENT_STREAMING, channel_);
    std::unique_ptr<grpc::ClientWriter<ByteBuffer>> w(
        grpc::internal::ClientWriterFactory<ByteBuffer>::Create(channel_.get(), m, &ctx, &out));
    const auto put = [&](const std::string& message) {
      if (!w->Write(to_buffer(message))) return false;
      submitted_ += static_cast<int64_t>(message.size());
      return true;
    };
    bool open = put(encode(h));
    for (size_t i = 0; open && i < chunks.size(); ++i) open = put(encode(chunks[i]));
    w->WritesDone();
    return w->Finish();
  });
  return parse_submit_reply(from_buffer(out));
}

ShardClient::Fetched ShardClient::fetch(const FetchRequest& r) {
  Fetched f;
  once("a fetch", [&](grpc::ClientContext& ctx) {
    f = {};
    const RpcMethod m(kFetchMethod, RpcMethod::SERVER_STREAMING, channel_);
    std::unique_ptr<grpc::ClientReader<ByteBuffer>> rd(
        grpc::internal::ClientReaderFactory<ByteBuffer>::Create(channel_.get(), m, &ctx, to_buffer(encode(r))));
    ByteBuffer b;
    bool first = true;
    while (rd->Read(&b)) {
      const auto bytes = from_buffer(b);
      if (first)
        f.header = parse_fetch_header(bytes);
      else
        f.chunks.push_back(parse_chunk(bytes));
      first = false;
    }
    return rd->Finish();
  });
  for (const auto& c : f.chunks) check_chunk(c);
  return f;
}

void ShardClient::attend(const Attend& a) {
  if (attending_.joinable()) return;
  attending_ = std::thread([this, request = encode(a)] {
    for (double backoff = 0.2;; backoff = std::min(backoff * 2, 5.0)) {
      grpc::ClientContext ctx;
      {
        std::lock_guard<std::mutex> lock(attend_mu_);
        if (attend_stopping_) return;
        attend_call_ = &ctx;
      }
      const RpcMethod m(kAttendMethod, RpcMethod::SERVER_STREAMING, channel_);
      std::unique_ptr<grpc::ClientReader<ByteBuffer>> rd(
          grpc::internal::ClientReaderFactory<ByteBuffer>::Create(channel_.get(), m, &ctx, to_buffer(request)));
      ByteBuffer b;
      bool held = false;
      while (rd->Read(&b)) held = true;
      const auto s = rd->Finish();
      std::unique_lock<std::mutex> lock(attend_mu_);
      attend_call_ = nullptr;
      if (!transient(s) || handshake_refused(s)) return;
      if (held) backoff = 0.2;  // it was held until the link or the shard failed: call again soon
      attend_changed_.wait_for(lock, std::chrono::duration<double>(backoff), [&] { return attend_stopping_; });
    }
  });
}

void ShardClient::stop_attending() {
  {
    std::lock_guard<std::mutex> lock(attend_mu_);
    attend_stopping_ = true;
    if (attend_call_) attend_call_->TryCancel();
  }
  attend_changed_.notify_all();
  if (attending_.joinable()) attending_.join();
}

void ShardClient::leave(const Leave& l) {
  stop_attending();
  ByteBuffer out;
  once("a leave", [&](grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const RpcMethod m(kLeaveMethod, RpcMethod::NORMAL_RPC, channel_);
    return grpc::internal::BlockingUnaryCall<ByteBuffer, ByteBuffer>(channel_.get(), m, &ctx, to_buffer(encode(l)), &out);
  });
}

Decision ShardClient::report(const Report& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ByteBuffer out;
  const RpcMethod m(kReportMethod, RpcMethod::NORMAL_RPC, channel_);
  const auto s =
      grpc::internal::BlockingUnaryCall<ByteBuffer, ByteBuffer>(channel_.get(), m, &ctx, to_buffer(encode(r)), &out);
  if (!s.ok()) throw Error(cat("the coordinator at ", address_, ": ", s.error_message()));
  return parse_decision(from_buffer(out));
}

}  // namespace fedshard::sites
