// Which job holds each site's name at one shard. A site's ranks are one job, whose calls carry one session number
// (their rank 0 draws it; wire.h). A job holds its site's name while it is connected: while one of its calls is open
// (each rank holds an Attend call open for as long as it runs, so a site that trains between rounds stays
// connected) or ended less than `linger` seconds ago (a rank's hello and its Attend are two calls). A call of
// another session under a held name is refused: a second job under one certificate never submits as the site. A
// job that is gone (killed, preempted, its link cut past keepalive) holds nothing once its calls end, and the next
// session to call takes the name: a restarted (requeued) site is let in. A leave frees the name at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace fedshard::sites {

class SiteSessions {
 public:
  using Clock = std::chrono::steady_clock;

  // `label`: the shard ("shard i/M"), for its lines.
  explicit SiteSessions(std::string label, double linger_seconds = 3);

  // One call of `session` under `site`'s name, counted open until it ends. Throws Refusal (ALREADY_EXISTS) where
  // another session holds the name.
  class Call {
   public:
    Call(SiteSessions& sessions, std::string site, uint64_t session);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    SiteSessions& sessions_;
    std::string site_;
    uint64_t tenure_;  // which holding of the name it counts in (a name released and taken again starts anew)
  };

  // A leave: `session` gives up `site`'s name (nothing where another holds it).
  void release(const std::string& site, uint64_t session);

 private:
  struct Holder {
    uint64_t session = 0, tenure = 0;
    int open = 0;  // calls in progress
    Clock::time_point last{};
  };
  uint64_t enter(const std::string& site, uint64_t session);  // the tenure the call counts in
  void leave(const std::string& site, uint64_t tenure);

  std::string label_;
  Clock::duration linger_;
  std::mutex mu_;
  std::map<std::string, Holder> holders_;
  uint64_t tenures_ = 0;
};

}  // namespace fedshard::sites
