// The messages between sites and the round server (docs/sites.md, "The protocol"), and their bytes: gRPC carries
// them as raw byte buffers (no protobuf: PyTorch's wheel ships its own protobuf, which cannot share a process with
// another; docs/sites.md says how that was found). Every message starts with the magic "FSR1" and its type; numbers
// are little-endian, strings and payloads a u32 length and their bytes. A parser reads exactly one message of the
// expected type and throws WireError on anything else (truncated, trailing bytes, a length beyond the limits).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fedshard::sites {

// 2: every call of a site carries its job's session (a second job under a connected site's name is refused).
constexpr uint32_t kProtocolVersion = 2;
// A data chunk's payload: at most this many bytes (4 MiB of float32 values), below gRPC's message limit.
constexpr uint32_t kMaxPayload = 4u << 20;
constexpr uint32_t kMaxString = 4096;
constexpr uint32_t kMaxSites = 4096;

struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class MsgType : uint8_t {
  Hello = 1, HelloReply, SubmitHeader, Chunk, SubmitReply, FetchRequest, FetchHeader, Leave, Ack, Report, Decision,
  Attend
};

// A site rank's greeting to a shard, on every (re)connection. A hello of another protocol version is read no further
// than its version, so that the server can say which one it speaks.
struct Hello {
  uint32_t version = kProtocolVersion;
  uint64_t session = 0;  // the site's job: one number its ranks agree on, never 0 (sites/site_sessions.h)
  std::string identity;  // the federation's identity (sites/identity.h): model, tokenizer, codec
  std::string site;
  uint32_t rank = 0, ranks = 1;  // this rank of the site's ranks
};

struct HelloReply {
  uint32_t version = kProtocolVersion;
  uint32_t shard = 0, shards = 1;
  int64_t begin = 0, end = 0, total = 0;  // this shard's elements of the model's `total`
  int64_t committed = -1;  // the last round this shard committed; -1: no model yet (round 0 takes a site's)
  std::string codec;       // what the rounds' deltas travel as ("none": float32 models)
};

// What a stream of chunks carries.
enum class Payload : uint8_t {
  Model = 1,  // float32 values: a site's model (round 0: its initial one), or a shard's global model
  Delta = 2,  // the codec's encoding of a delta from the last global model
};

// The first message of a Submit stream: one site rank's contribution to round `round` over [begin, end).
struct SubmitHeader {
  int64_t round = 0;
  std::string site;
  uint64_t session = 0;
  uint32_t rank = 0;
  Payload payload = Payload::Model;
  double tokens = 0;  // the site's weight: tokens it trained on since its last round
  int64_t begin = 0, end = 0;
};

// A piece of a Submit or Fetch stream: `count` elements from global element `offset`, their checksum (CRC-32C of
// the payload).
struct Chunk {
  int64_t offset = 0, count = 0;
  uint32_t crc32c = 0;
  std::string payload;
};

struct SubmitReply {
  bool accepted = false;
  std::string message;     // why not
  int64_t committed = -1;  // the shard's last committed round
};

struct FetchRequest {
  int64_t round = 0;       // the round whose result the rank wants (the shard's later one will do)
  int64_t have = -1;       // the round whose global model the rank holds: a delta from it suffices
  std::string site;
  uint64_t session = 0;
  uint32_t rank = 0;
  int64_t begin = 0, end = 0;
};

// The first message of a Fetch stream: the committed round's global model over the range asked for, whole
// (Payload::Model) or as the codec's encoding of its change from round `round - 1` (Payload::Delta).
struct FetchHeader {
  int64_t round = 0;
  Payload payload = Payload::Model;
  bool included = false;     // the asking site's contribution is in this round
  uint32_t participants = 0;
  double tokens = 0;         // the participants' tokens
};

struct Leave {
  std::string site;
  uint64_t session = 0;
};

// A site rank's call held open for as long as its job runs: the shard counts the job as connected while it is open
// (sites/site_sessions.h). The shard answers with one Ack once it counts it, then nothing until the call ends.
struct Attend {
  std::string site;
  uint64_t session = 0;
  uint32_t rank = 0;
};

struct Ack {
  bool ok = true;
  std::string message;
};

// Between shards: shard `shard`'s state of round `round` (attempt `attempt`), to the coordinator (shard 0).
struct SiteTokens {
  std::string site;
  double tokens = 0;
  // The site's delta from the last global model: in a Report, its squared norm over the reporting shard's elements;
  // in a Decision, over the whole model. The coordinator's norm bound (--norm-bound) reads it.
  double norm2 = 0;
  double scale = 1;  // in a Decision: what the site's delta is multiplied by (below 1: clipped to the bound)
};
enum class ShardState : uint8_t { Collecting = 0, Prepared = 1, Missing = 2 };
struct Report {
  int64_t round = 0;
  uint32_t attempt = 0, shard = 0;
  ShardState state = ShardState::Collecting;
  std::vector<SiteTokens> complete;  // sites whose data over the shard's range has arrived
};
enum class Verdict : uint8_t { Wait = 0, Prepare = 1, Commit = 2, Abort = 3 };
struct Decision {
  int64_t round = 0;
  uint32_t attempt = 0;
  Verdict verdict = Verdict::Wait;
  std::vector<SiteTokens> participants;
  std::string aggregate = "mean";  // how every shard combines the participants' deltas (sites/round_math.h)
};

std::string encode(const Hello& m);
std::string encode(const HelloReply& m);
std::string encode(const SubmitHeader& m);
std::string encode(const Chunk& m);
std::string encode(const SubmitReply& m);
std::string encode(const FetchRequest& m);
std::string encode(const FetchHeader& m);
std::string encode(const Leave& m);
std::string encode(const Ack& m);
std::string encode(const Report& m);
std::string encode(const Decision& m);
std::string encode(const Attend& m);

Hello parse_hello(const std::string& bytes);
HelloReply parse_hello_reply(const std::string& bytes);
SubmitHeader parse_submit_header(const std::string& bytes);
Chunk parse_chunk(const std::string& bytes);
SubmitReply parse_submit_reply(const std::string& bytes);
FetchRequest parse_fetch_request(const std::string& bytes);
FetchHeader parse_fetch_header(const std::string& bytes);
Leave parse_leave(const std::string& bytes);
Ack parse_ack(const std::string& bytes);
Report parse_report(const std::string& bytes);
Decision parse_decision(const std::string& bytes);
Attend parse_attend(const std::string& bytes);

// A chunk of `count` elements with its payload's checksum.
Chunk make_chunk(int64_t offset, int64_t count, std::string payload);
// Throws WireError where the payload does not match its checksum.
void check_chunk(const Chunk& c);

}  // namespace fedshard::sites
