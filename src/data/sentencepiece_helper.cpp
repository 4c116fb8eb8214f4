// fedshard-sentencepiece MODEL: runs Debian's libsentencepiece for fedshard's sentencepiece: tokenizer, in a
// process of its own. libsentencepiece carries its own copy of protobuf under the same symbol names as the
// libprotobuf that LibTorch loads; in one process, libprotobuf's start-up runs libsentencepiece's copy and
// crashes. A process apart also turns a model file that crashes the library into an error line, not a crash.
// Speaks sentencepiece_protocol.h on file descriptor 3; not meant to be run by hand.
#include <sentencepiece_processor.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/sentencepiece_protocol.h"

namespace {

constexpr int kSocket = 3;  // fedshard's end of the socket (HelperProcess::kSocketFd)
namespace proto = fedshard::data::sentencepiece_protocol;

bool read_all(void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::read(kSocket, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void write_all(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(kSocket, p, n);
    if (put <= 0) std::_Exit(1);  // fedshard has gone: nobody to answer
    p += put;
    n -= static_cast<size_t>(put);
  }
}

void write_u32(uint32_t v) { write_all(&v, sizeof v); }

void write_failure(const std::string& message) {
  write_u32(proto::kFailed);
  write_u32(static_cast<uint32_t>(message.size()));
  write_all(message.data(), message.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fedshard-sentencepiece MODEL (fedshard's helper, spoken to by fedshard)\n");
    return 2;
  }
  sentencepiece::SentencePieceProcessor sp;
  const auto loaded = sp.Load(argv[1]);
  if (!loaded.ok()) {
    write_failure(loaded.ToString());
    return 0;
  }
  write_u32(proto::kOk);
  write_u32(static_cast<uint32_t>(sp.GetPieceSize()));
  const int32_t specials[2] = {sp.bos_id(), sp.eos_id()};
  write_all(specials, sizeof specials);

  uint8_t op = 0;
  uint32_t n = 0;
  std::string text;
  std::vector<int> ids;
  while (read_all(&op, 1) && read_all(&n, sizeof n)) {
    if (op == proto::kEncode) {
      text.resize(n);
      if (!read_all(text.data(), n)) break;
      const auto status = sp.Encode(text, &ids);
      if (!status.ok()) {
        write_failure(status.ToString());
        continue;
      }
      write_u32(proto::kOk);
      write_u32(static_cast<uint32_t>(ids.size()));
      write_all(ids.data(), ids.size() * sizeof(int));
    } else if (op == proto::kDecode) {
      ids.resize(n);
      if (!read_all(ids.data(), n * sizeof(int))) break;
      const auto status = sp.Decode(ids, &text);
      if (!status.ok() || text.size() > UINT32_MAX) {
        write_failure(status.ok() ? "the text is over the 4 GiB one reply may hold" : status.ToString());
        continue;
      }
      write_u32(proto::kOk);
      write_u32(static_cast<uint32_t>(text.size()));
      write_all(text.data(), text.size());
    } else {
      write_failure("unknown request");
      break;
    }
  }
  return 0;
}
