// Encodes prepare's documents on several threads and hands each document's ids back in the order the documents
// were submitted, so the shards written from them do not depend on the number of workers.
//
// Each worker has a tokenizer of its own (make_tokenizer(spec)): a SentencePiece tokenizer is a helper process
// per worker, and no tokenizer needs to be thread-safe. With one worker, documents are encoded on the calling
// thread. Memory: the documents in flight hold at most about `max_bytes_in_flight` of text (one document more
// where a single document is larger), whatever the corpus size.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/tokenizer.h"

namespace fedshard::data {

class EncodePool {
 public:
  using Done = std::function<void(std::vector<uint32_t>& ids)>;

  EncodePool(const std::string& tokenizer_spec, int workers, size_t max_bytes_in_flight);
  ~EncodePool();  // stops the workers (documents in flight are dropped)
  EncodePool(const EncodePool&) = delete;
  EncodePool& operator=(const EncodePool&) = delete;

  // Queues a document. `done` runs later on the calling thread (in submit or finish), in submission order. An
  // encoding error is rethrown there as "WHERE: what", at the document's turn, as one thread would meet it.
  void submit(std::string text, std::string where, Done done);
  void finish();  // returns once every submitted document's `done` has run

  int workers() const { return static_cast<int>(tokenizers_.size()); }
  const Tokenizer& tokenizer() const { return *tokenizers_.front(); }  // for its vocabulary, ids and spec

 private:
  struct Job {
    std::string text, where;
    Done done;
    std::vector<uint32_t> ids;
    bool encoded = false, failed = false;
    std::string error;  // what encode threw, where it failed
  };
  void work(const Tokenizer& tok);
  void deliver_ready(bool wait_for_one);  // runs `done` for the encoded documents at the head of the order

  std::vector<std::unique_ptr<Tokenizer>> tokenizers_;
  std::vector<std::thread> threads_;
  size_t max_bytes_;
  std::mutex mutex_;
  std::condition_variable work_ready_, job_encoded_;
  std::map<uint64_t, Job> jobs_;  // submitted, not yet delivered, by submission number
  uint64_t next_submit_ = 0, next_encode_ = 0, next_deliver_ = 0;
  size_t bytes_in_flight_ = 0;
  bool stopping_ = false;
};

}  // namespace fedshard::data
