// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TFRecord framing (TensorBoard event
// files).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fedshard {

uint32_t crc32c(const void* data, size_t size);

// TFRecord's masked form: a CRC stored next to the data it covers is rotated and offset, so that the CRC of
// a string that holds CRCs stays well distributed.
inline uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace fedshard
