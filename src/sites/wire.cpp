#include "sites/wire.h"

#include <cstring>

#include "util/crc32c.h"

namespace fedshard::sites {

namespace {

constexpr uint32_t kMagic = 0x31525346;  // "FSR1" little-endian

class Writer {
 public:
  explicit Writer(MsgType t) {
    u32(kMagic);
    u8(static_cast<uint8_t>(t));
  }
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void i64(int64_t v) { raw(&v, 8); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  // The hosts we build for are little-endian (x86-64, aarch64): the bytes of a number are its wire form.
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& bytes, MsgType t, const char* what) : s_(bytes), what_(what) {
    if (u32() != kMagic) fail("not a fedshard site message (no FSR1 magic)");
    const uint8_t type = u8();
    if (type != static_cast<uint8_t>(t)) fail("message of type " + std::to_string(type) + ", expected " +
                                               std::to_string(static_cast<int>(t)));
  }
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(s_[pos_++]);
  }
  bool flag() {
    const uint8_t v = u8();
    if (v > 1) fail("a flag of " + std::to_string(v));
    return v == 1;
  }
  uint32_t u32() { return raw<uint32_t>(); }
  int64_t i64() { return raw<int64_t>(); }
  uint64_t session() {
    const auto v = raw<uint64_t>();
    if (v == 0) fail("session 0");
    return v;
  }
  double f64() { return raw<double>(); }
  std::string str(uint32_t limit = kMaxString) {
    const uint32_t n = u32();
    if (n > limit) fail("a field of " + std::to_string(n) + " bytes (at most " + std::to_string(limit) + ")");
    need(n);
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  void done() {
    if (pos_ != s_.size()) fail(std::to_string(s_.size() - pos_) + " bytes after the message");
  }
  [[noreturn]] void fail(const std::string& why) const { throw WireError(std::string(what_) + ": " + why); }

 private:
  template <class T>
  T raw() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  void need(size_t n) const {
    if (s_.size() - pos_ < n) fail("truncated");
  }
  const std::string& s_;
  size_t pos_ = 0;
  const char* what_;
};

Payload payload_of(Reader& r) {
  const uint8_t v = r.u8();
  if (v != static_cast<uint8_t>(Payload::Model) && v != static_cast<uint8_t>(Payload::Delta))
    r.fail("unknown payload kind " + std::to_string(v));
  return static_cast<Payload>(v);
}

void range_of(Reader& r, int64_t& begin, int64_t& end) {
  begin = r.i64();
  end = r.i64();
  if (begin < 0 || end < begin) r.fail("range [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
}

void write_sites(Writer& w, const std::vector<SiteTokens>& sites) {
  w.u32(static_cast<uint32_t>(sites.size()));
  for (const auto& s : sites) {
    w.str(s.site);
    w.f64(s.tokens);
    w.f64(s.norm2);
    w.f64(s.scale);
  }
}

std::vector<SiteTokens> read_sites(Reader& r) {
  const uint32_t n = r.u32();
  if (n > kMaxSites) r.fail(std::to_string(n) + " sites (at most " + std::to_string(kMaxSites) + ")");
  std::vector<SiteTokens> out(n);
  for (auto& s : out) {
    s.site = r.str();
    s.tokens = r.f64();
    s.norm2 = r.f64();
    s.scale = r.f64();
  }
  return out;
}

}  // namespace

std::string encode(const Hello& m) {
  Writer w(MsgType::Hello);
  w.u32(m.version);
  w.u64(m.session);
  w.str(m.identity);
  w.str(m.site);
  w.u32(m.rank);
  w.u32(m.ranks);
  return w.take();
}

Hello parse_hello(const std::string& bytes) {
  Reader r(bytes, MsgType::Hello, "hello");
  Hello m;
  m.version = r.u32();
  if (m.version != kProtocolVersion) return m;  // another protocol's: the server refuses it by its version
  m.session = r.session();
  m.identity = r.str();
  m.site = r.str();
  m.rank = r.u32();
  m.ranks = r.u32();
  if (m.ranks == 0 || m.rank >= m.ranks) r.fail("rank " + std::to_string(m.rank) + " of " + std::to_string(m.ranks));
  r.done();
  return m;
}

std::string encode(const HelloReply& m) {
  Writer w(MsgType::HelloReply);
  w.u32(m.version);
  w.u32(m.shard);
  w.u32(m.shards);
  w.i64(m.begin);
  w.i64(m.end);
  w.i64(m.total);
  w.i64(m.committed);
  w.str(m.codec);
  return w.take();
}

HelloReply parse_hello_reply(const std::string& bytes) {
  Reader r(bytes, MsgType::HelloReply, "hello reply");
  HelloReply m;
  m.version = r.u32();
  m.shard = r.u32();
  m.shards = r.u32();
  range_of(r, m.begin, m.end);
  m.total = r.i64();
  m.committed = r.i64();
  m.codec = r.str();
  if (m.shards == 0 || m.shard >= m.shards || m.end > m.total || m.committed < -1) r.fail("inconsistent shard fields");
  r.done();
  return m;
}

std::string encode(const SubmitHeader& m) {
  Writer w(MsgType::SubmitHeader);
  w.i64(m.round);
  w.str(m.site);
  w.u64(m.session);
  w.u32(m.rank);
  w.u8(static_cast<uint8_t>(m.payload));
  w.f64(m.tokens);
  w.i64(m.begin);
  w.i64(m.end);
  return w.take();
}

SubmitHeader parse_submit_header(const std::string& bytes) {
  Reader r(bytes, MsgType::SubmitHeader, "submission header");
  SubmitHeader m;
  m.round = r.i64();
  m.site = r.str();
  m.session = r.session();
  m.rank = r.u32();
  m.payload = payload_of(r);
  m.tokens = r.f64();
  range_of(r, m.begin, m.end);
  if (m.round < 0) r.fail("round " + std::to_string(m.round));
  if (!(m.tokens >= 0) || m.tokens > 1e18) r.fail("tokens " + std::to_string(m.tokens));
  r.done();
  return m;
}

std::string encode(const Chunk& m) {
  Writer w(MsgType::Chunk);
  w.i64(m.offset);
  w.i64(m.count);
  w.u32(m.crc32c);
  w.str(m.payload);
  return w.take();
}

Chunk parse_chunk(const std::string& bytes) {
  Reader r(bytes, MsgType::Chunk, "chunk");
  Chunk m;
  m.offset = r.i64();
  m.count = r.i64();
  if (m.offset < 0 || m.count <= 0) r.fail("offset " + std::to_string(m.offset) + ", count " + std::to_string(m.count));
  m.crc32c = r.u32();
  m.payload = r.str(kMaxPayload);
  r.done();
  return m;
}

std::string encode(const SubmitReply& m) {
  Writer w(MsgType::SubmitReply);
  w.u8(m.accepted ? 1 : 0);
  w.str(m.message);
  w.i64(m.committed);
  return w.take();
}

SubmitReply parse_submit_reply(const std::string& bytes) {
  Reader r(bytes, MsgType::SubmitReply, "submission reply");
  SubmitReply m;
  m.accepted = r.flag();
  m.message = r.str();
  m.committed = r.i64();
  r.done();
  return m;
}

std::string encode(const FetchRequest& m) {
  Writer w(MsgType::FetchRequest);
  w.i64(m.round);
  w.i64(m.have);
  w.str(m.site);
  w.u64(m.session);
  w.u32(m.rank);
  w.i64(m.begin);
  w.i64(m.end);
  return w.take();
}

FetchRequest parse_fetch_request(const std::string& bytes) {
  Reader r(bytes, MsgType::FetchRequest, "fetch request");
  FetchRequest m;
  m.round = r.i64();
  m.have = r.i64();
  m.site = r.str();
  m.session = r.session();
  m.rank = r.u32();
  range_of(r, m.begin, m.end);
  if (m.round < 0 || m.have < -1) r.fail("round " + std::to_string(m.round) + ", have " + std::to_string(m.have));
  r.done();
  return m;
}

std::string encode(const FetchHeader& m) {
  Writer w(MsgType::FetchHeader);
  w.i64(m.round);
  w.u8(static_cast<uint8_t>(m.payload));
  w.u8(m.included ? 1 : 0);
  w.u32(m.participants);
  w.f64(m.tokens);
  return w.take();
}

FetchHeader parse_fetch_header(const std::string& bytes) {
  Reader r(bytes, MsgType::FetchHeader, "fetch header");
  FetchHeader m;
  m.round = r.i64();
  m.payload = payload_of(r);
  m.included = r.flag();
  m.participants = r.u32();
  m.tokens = r.f64();
  if (m.round < 0) r.fail("round " + std::to_string(m.round));
  r.done();
  return m;
}

std::string encode(const Leave& m) {
  Writer w(MsgType::Leave);
  w.str(m.site);
  w.u64(m.session);
  return w.take();
}

Leave parse_leave(const std::string& bytes) {
  Reader r(bytes, MsgType::Leave, "leave");
  Leave m;
  m.site = r.str();
  m.session = r.session();
  r.done();
  return m;
}

std::string encode(const Ack& m) {
  Writer w(MsgType::Ack);
  w.u8(m.ok ? 1 : 0);
  w.str(m.message);
  return w.take();
}

Ack parse_ack(const std::string& bytes) {
  Reader r(bytes, MsgType::Ack, "acknowledgement");
  Ack m;
  m.ok = r.flag();
  m.message = r.str();
  r.done();
  return m;
}

std::string encode(const Report& m) {
  Writer w(MsgType::Report);
  w.i64(m.round);
  w.u32(m.attempt);
  w.u32(m.shard);
  w.u8(static_cast<uint8_t>(m.state));
  write_sites(w, m.complete);
  return w.take();
}

Report parse_report(const std::string& bytes) {
  Reader r(bytes, MsgType::Report, "report");
  Report m;
  m.round = r.i64();
  m.attempt = r.u32();
  m.shard = r.u32();
  const uint8_t state = r.u8();
  if (state > 2) r.fail("unknown shard state " + std::to_string(state));
  m.state = static_cast<ShardState>(state);
  m.complete = read_sites(r);
  r.done();
  return m;
}

std::string encode(const Decision& m) {
  Writer w(MsgType::Decision);
  w.i64(m.round);
  w.u32(m.attempt);
  w.u8(static_cast<uint8_t>(m.verdict));
  write_sites(w, m.participants);
  w.str(m.aggregate);
  return w.take();
}

Decision parse_decision(const std::string& bytes) {
  Reader r(bytes, MsgType::Decision, "decision");
  Decision m;
  m.round = r.i64();
  m.attempt = r.u32();
  const uint8_t verdict = r.u8();
  if (verdict > 3) r.fail("unknown verdict " + std::to_string(verdict));
  m.verdict = static_cast<Verdict>(verdict);
  m.participants = read_sites(r);
  m.aggregate = r.str();
  r.done();
  return m;
}

std::string encode(const Attend& m) {
  Writer w(MsgType::Attend);
  w.str(m.site);
  w.u64(m.session);
  w.u32(m.rank);
  return w.take();
}

Attend parse_attend(const std::string& bytes) {
  Reader r(bytes, MsgType::Attend, "attend");
  Attend m;
  m.site = r.str();
  m.session = r.session();
  m.rank = r.u32();
  r.done();
  return m;
}

Chunk make_chunk(int64_t offset, int64_t count, std::string payload) {
  Chunk c;
  c.offset = offset;
  c.count = count;
  c.crc32c = crc32c(payload.data(), payload.size());
  c.payload = std::move(payload);
  return c;
}

void check_chunk(const Chunk& c) {
  if (crc32c(c.payload.data(), c.payload.size()) != c.crc32c)
    throw WireError("chunk at element " + std::to_string(c.offset) + ": checksum mismatch (corrupted in transit)");
}

}  // namespace fedshard::sites
