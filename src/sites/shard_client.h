// One party's connection to one round server shard (a site rank's, or a shard's to the coordinator): the calls of
// the protocol (sites/wire.h) over one gRPC channel. A hello and a leave are tried again with backoff while the
// shard cannot be reached (restarting, a link down) for up to `patience` seconds; a submission and a fetch throw
// Disconnected instead, for the caller's own retry (sites/site_lane.cpp). A refusal ends a call at once, as a
// fedshard::Error with the server's line; so does a server certificate that does not verify against the CA. A hello
// refused because another job holds the site's name is tried again for up to a minute: a predecessor that died
// without closing its connections holds it until keepalive ends them (sites/site_sessions.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sites/tls.h"
#include "sites/wire.h"

namespace fedshard::sites {

// What a call's outcome was, where the caller decides: the round it named is closed or not open yet (ABORTED);
// the shard could not be reached or the link cut the call (the caller sends its data again: a restarted shard lost
// what it had not committed).
struct RoundMoved {
  std::string message;
};
struct Disconnected {
  std::string message;
};

class ShardClient {
 public:
  ShardClient(std::string address, const TlsMaterial& tls, const std::string& server_name, double patience);
  ~ShardClient();
  const std::string& address() const { return address_; }

  HelloReply hello(const Hello& h);
  double patience() const { return patience_; }
  // The header, then the chunks; throws RoundMoved where the round is closed or not open, Disconnected.
  SubmitReply submit(const SubmitHeader& h, const std::vector<Chunk>& chunks);
  // Waits for the round's result: its header and chunks.
  struct Fetched {
    FetchHeader header;
    std::vector<Chunk> chunks;
  };
  Fetched fetch(const FetchRequest& r);
  // Holds an Attend call open from a thread of its own until leave() or the end of this client, opened again after a
  // disconnection; a refusal ends it (the next call says why).
  void attend(const Attend& a);
  // Once, briefly: a site that ends does not wait for an absent server. Ends the Attend call first.
  void leave(const Leave& l);
  // Once, without retries (the shard's driver asks again).
  Decision report(const Report& r);
  // Bytes of the submissions' messages gRPC took so far (a stream cut off counts what it took).
  int64_t submitted_bytes() const { return submitted_.load(); }

 private:
  // Runs `call` (a fresh context each try) until it returns a status that is not a failure to reach the shard.
  grpc::Status with_retries(const char* what, const std::function<grpc::Status(grpc::ClientContext&)>& call);
  // Runs `call` once: ABORTED becomes RoundMoved, a failure to reach the shard Disconnected, a refusal an Error.
  void once(const char* what, const std::function<grpc::Status(grpc::ClientContext&)>& call);
  [[noreturn]] void fail(const char* what, const grpc::Status& s) const;

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  double patience_;
  void stop_attending();

  std::atomic<int64_t> submitted_{0};
  std::thread attending_;
  std::mutex attend_mu_;
  std::condition_variable attend_changed_;
  bool attend_stopping_ = false;
  grpc::ClientContext* attend_call_ = nullptr;  // the Attend call open now, for its cancellation
};

}  // namespace fedshard::sites
