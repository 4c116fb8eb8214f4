// The round server's messages (src/sites/wire.h) as they arrive from the network: any peer that passed TLS can
// send any bytes. The first byte picks the parser; bad input must end in WireError, and a message that parses
// must encode to bytes that parse to the same message again. A hello's federation identity is parsed further, as
// the server does (sites/identity.h): bad JSON or fields end in an exception, never a crash.
#include <cstdint>
#include <string>

#include "sites/identity.h"
#include "sites/wire.h"

namespace {

template <typename Parse>
void check(Parse parse, const std::string& bytes) {
  using namespace fedshard::sites;
  try {
    const auto once = encode(parse(bytes));
    if (encode(parse(once)) != once) __builtin_trap();
  } catch (const WireError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fedshard::sites;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 12) {
    case 0:
      check(parse_hello, bytes);
      try {
        const auto theirs = Identity::from_json(nlohmann::json::parse(parse_hello(bytes).identity));
        if (theirs.differs(theirs).empty() && theirs.codec != "none") theirs.make_codec();
      } catch (const std::exception&) {
      }
      break;
    case 1: check(parse_hello_reply, bytes); break;
    case 2: check(parse_submit_header, bytes); break;
    case 3:
      check(parse_chunk, bytes);
      try {
        check_chunk(parse_chunk(bytes));
      } catch (const WireError&) {
      }
      break;
    case 4: check(parse_submit_reply, bytes); break;
    case 5: check(parse_fetch_request, bytes); break;
    case 6: check(parse_fetch_header, bytes); break;
    case 7: check(parse_leave, bytes); break;
    case 8: check(parse_ack, bytes); break;
    case 9: check(parse_report, bytes); break;
    case 10: check(parse_decision, bytes); break;
    default: check(parse_attend, bytes); break;
  }
  return 0;
}
