#include "data/sentencepiece_tokenizer.h"

#include <cstring>
#include <fstream>

#include "data/sentencepiece_protocol.h"
#include "util/error.h"
#include "util/fnv1a.h"
#include "util/posix_file.h"

namespace fedshard::data {
namespace {

namespace sp_proto = sentencepiece_protocol;

uint64_t fingerprint_of(const std::string& path) {
  const std::string data = read_file(path);  // also: a missing file is named before a helper starts
  return fnv1a64(data.data(), data.size());
}

}  // namespace

bool is_sentencepiece_model(const std::string& path) {
  // ModelProto field 1 (a piece: tag 0x0A, a varint length), whose own field 1 is the piece's text (tag 0x0A,
  // its length, shorter than the piece). A tiktoken file (base64 lines, blank lines allowed) has this shape only
  // if it opens with three blank lines and a control character.
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof head);
  const auto n = static_cast<int>(in.gcount());
  if (n < 4 || head[0] != '\x0a') return false;
  uint64_t piece_length = 0;
  int i = 1;
  for (int shift = 0; i < n && shift < 64; shift += 7) {
    const auto byte = static_cast<unsigned char>(head[i++]);
    piece_length |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) break;
  }
  return i + 1 < n && head[i] == '\x0a' && static_cast<unsigned char>(head[i + 1]) < piece_length;
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : path_(path),
      fingerprint_(fingerprint_of(path)),
      helper_("fedshard-sentencepiece", {path}, "libsentencepiece", path) {
  const char* doing = "loading it";
  if (helper_.recv_value<uint32_t>(doing) != sp_proto::kOk) {
    std::string message(helper_.recv_value<uint32_t>(doing), '\0');
    helper_.recv(message.data(), message.size(), doing);
    throw Error(cat(path, ": not a SentencePiece model the library can load (", message, ")"));
  }
  const auto pieces = helper_.recv_value<uint32_t>(doing);
  const auto bos = helper_.recv_value<int32_t>(doing), eos = helper_.recv_value<int32_t>(doing);
  FS_CHECK(eos >= 0 && static_cast<uint32_t>(eos) < pieces, path, ": the model has no end-of-sentence piece (eos_id ",
           eos, "), which fedshard puts after every document");
  vocab_size_ = pieces;
  eos_ = static_cast<uint32_t>(eos);
  bos_ = bos >= 0 && static_cast<uint32_t>(bos) < pieces ? static_cast<uint32_t>(bos) : eos_;
}

std::string SentencePieceTokenizer::exchange(uint8_t op, std::string_view payload, size_t item_bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* doing = op == sp_proto::kEncode ? "encoding" : "decoding";
  const auto count = static_cast<uint32_t>(payload.size() / item_bytes);
  FS_CHECK(payload.size() / item_bytes == count, path_, ": ", doing, " ", payload.size(),
           " bytes at once is over the 4 GiB the helper takes");
  helper_.send(&op, 1, doing);
  helper_.send(&count, sizeof count, doing);
  helper_.send(payload.data(), payload.size(), doing);
  const auto status = helper_.recv_value<uint32_t>(doing);
  const auto n = helper_.recv_value<uint32_t>(doing);
  std::string reply(status == sp_proto::kOk && op == sp_proto::kEncode ? size_t{n} * sizeof(uint32_t) : size_t{n}, '\0');
  helper_.recv(reply.data(), reply.size(), doing);
  FS_CHECK(status == sp_proto::kOk, path_, ": libsentencepiece failed ", doing, ": ", reply);
  return reply;
}

std::vector<uint32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  const std::string reply = exchange(sp_proto::kEncode, text, 1);
  std::vector<uint32_t> ids(reply.size() / sizeof(uint32_t));
  if (!ids.empty()) std::memcpy(ids.data(), reply.data(), reply.size());
  return ids;
}

std::string SentencePieceTokenizer::decode(const std::vector<uint32_t>& ids) const {
  for (uint32_t id : ids) FS_CHECK(id < vocab_size_, "token id ", id, " is outside ", path_, "'s ", vocab_size_, " pieces");
  return exchange(sp_proto::kDecode,
                  std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint32_t)),
                  sizeof(uint32_t));
}

}  // namespace fedshard::data
