#include "data/encode_pool.h"

#include <exception>

#include "util/error.h"

namespace fedshard::data {

EncodePool::EncodePool(const std::string& tokenizer_spec, int workers, size_t max_bytes_in_flight)
    : max_bytes_(max_bytes_in_flight) {
  FS_CHECK(workers >= 1, "workers must be at least 1, got ", workers);
  // Loaded side by side: a large tokenizer.json takes a while to parse, once per worker.
  tokenizers_.resize(static_cast<size_t>(workers));
  std::vector<std::exception_ptr> failed(tokenizers_.size());
  const auto load = [&](size_t w) {
    try {
      tokenizers_[w] = make_tokenizer(tokenizer_spec);
    } catch (...) {
      failed[w] = std::current_exception();
    }
  };
  std::vector<std::thread> loaders;
  for (size_t w = 1; w < tokenizers_.size(); ++w) loaders.emplace_back(load, w);
  load(0);
  for (auto& t : loaders) t.join();
  for (const auto& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  if (workers > 1)
    for (const auto& tok : tokenizers_) threads_.emplace_back([this, t = tok.get()] { work(*t); });
}

EncodePool::~EncodePool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void EncodePool::work(const Tokenizer& tok) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || next_encode_ < next_submit_; });
    if (stopping_) return;
    Job& job = jobs_.at(next_encode_++);  // std::map: the reference stays valid while others are inserted
    lock.unlock();
    std::vector<uint32_t> ids;
    std::string error;
    bool failed = false;
    try {
      ids = tok.encode(job.text);
    } catch (const std::exception& e) {
      error = e.what();
      failed = true;
    }
    lock.lock();
    job.ids = std::move(ids);
    job.error = std::move(error);
    job.failed = failed;
    job.encoded = true;
    job_encoded_.notify_all();
  }
}

void EncodePool::submit(std::string text, std::string where, Done done) {
  if (threads_.empty()) {
    std::vector<uint32_t> ids;
    try {
      ids = tokenizers_.front()->encode(text);
    } catch (const Error& e) {
      throw Error(cat(where, ": ", e.what()));
    }
    done(ids);
    return;
  }
  const size_t bytes = text.size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.emplace(next_submit_++, Job{std::move(text), std::move(where), std::move(done), {}, false, false, {}});
    bytes_in_flight_ += bytes;
  }
  work_ready_.notify_one();
  deliver_ready(false);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (bytes_in_flight_ <= max_bytes_ || next_deliver_ == next_submit_) break;
    }
    deliver_ready(true);  // over the bound: wait for the oldest document
  }
}

void EncodePool::finish() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_deliver_ == next_submit_) return;
    }
    deliver_ready(true);
  }
}

void EncodePool::deliver_ready(bool wait_for_one) {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (next_deliver_ == next_submit_) return;
      auto it = jobs_.find(next_deliver_);
      if (!it->second.encoded) {
        if (!wait_for_one) return;
        job_encoded_.wait(lock, [&] { return it->second.encoded; });
      }
      job = std::move(it->second);
      jobs_.erase(it);
      ++next_deliver_;
      bytes_in_flight_ -= job.text.size();
    }
    wait_for_one = false;
    if (job.failed) throw Error(cat(job.where, ": ", job.error));
    job.done(job.ids);
  }
}

}  // namespace fedshard::data
