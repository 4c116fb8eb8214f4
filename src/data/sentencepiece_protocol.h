// What fedshard says to its SentencePiece helper process (sentencepiece_helper.cpp) over a socket, and what it
// answers. Both ends are built together, so the frames are native-endian.
//
//   on start   helper -> fedshard   u32 kOk, then u32 piece count, i32 BOS id, i32 EOS id (-1: the model has none)
//                                   | u32 kFailed, u32 length, the library's message
//   request    fedshard -> helper   u8 kEncode, u32 length, the text   | u8 kDecode, u32 count, u32 ids
//   reply      helper -> fedshard   u32 kOk, u32 count, u32 ids (encode) or u32 length, the text (decode)
//                                   | u32 kFailed, u32 length, the library's message
// The helper ends when fedshard closes its end.
#pragma once

#include <cstdint>

namespace fedshard::data::sentencepiece_protocol {

constexpr uint8_t kEncode = 'E';
constexpr uint8_t kDecode = 'D';
constexpr uint32_t kOk = 0;
constexpr uint32_t kFailed = 1;

}  // namespace fedshard::data::sentencepiece_protocol
