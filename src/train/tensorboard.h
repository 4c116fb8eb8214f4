// TensorBoard event files beside metrics.jsonl (train.tensorboard = DIR): every numeric field of a step or eval
// metrics line becomes a scalar at that line's step, tagged by the line's type and the field's path
// ("train/loss", "train/bytes/inter_group", "eval/global/val_ppl").
//
// A file is a sequence of TFRecords (length, masked CRC-32C of the length, an Event protobuf, masked CRC-32C of
// the Event). The three messages used (Event, Summary.Value, SessionLog) are encoded here by hand, field
// numbers as in TensorFlow's event.proto / summary.proto: LibTorch's wheel exports its own protobuf's symbols,
// so linking a second protobuf runtime into the binary would bind one version's generated code to the other's
// library.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

namespace fedshard::train {

class TensorBoardLog {
 public:
  // A new event file in dir (created if missing). resumed_after: the step the run continues after (-1 for a new
  // run). The file starts with a SessionLog START at resumed_after + 1, which makes TensorBoard drop what earlier
  // files hold for later steps (a resumed run's steps trained again after its checkpoint).
  void open(const std::string& dir, int64_t resumed_after);
  ~TensorBoardLog();
  bool is_open() const { return file_ != nullptr; }
  // The scalars of one metrics line (lines of other types, or without a step, write nothing).
  void write(const nlohmann::json& line);

 private:
  void record(const std::string& event);

  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace fedshard::train
