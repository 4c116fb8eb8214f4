// What fedshard's Parquet helper (parquet_helper.cpp, `fedshard-parquet FILE TEXT_COLUMN [SOURCE_COLUMN]`)
// sends over its socket: the file's records in order, as fast as fedshard takes them (the socket's buffer is
// the only queue). Native-endian: both ends are built together.
//
//   kRecord, u32 length, the text, u32 length, the source label (empty without SOURCE_COLUMN)   per row
//   kEnd                                                                                         after the last
//   kFailed, u32 length, a message naming the column or row                                     instead
#pragma once

#include <cstdint>

namespace fedshard::data::parquet_protocol {

constexpr uint32_t kRecord = 1;
constexpr uint32_t kEnd = 2;
constexpr uint32_t kFailed = 3;

}  // namespace fedshard::data::parquet_protocol
