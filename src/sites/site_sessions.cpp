#include "sites/site_sessions.h"

#include <grpcpp/support/status_code_enum.h>

#include <cinttypes>
#include <cstdio>

#include "sites/refusal.h"
#include "util/error.h"

namespace fedshard::sites {

namespace {

std::string session_hex(uint64_t session) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, session);
  return buf;
}

}  // namespace

SiteSessions::SiteSessions(std::string label, double linger_seconds)
    : label_(std::move(label)),
      linger_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(linger_seconds))) {}

SiteSessions::Call::Call(SiteSessions& sessions, std::string site, uint64_t session)
    : sessions_(sessions), site_(std::move(site)), tenure_(sessions_.enter(site_, session)) {}

SiteSessions::Call::~Call() { sessions_.leave(site_, tenure_); }

uint64_t SiteSessions::enter(const std::string& site, uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  auto& h = holders_[site];
  if (h.session != session) {
    if (h.session != 0 && (h.open > 0 || now - h.last < linger_))
      throw Refusal{grpc::ALREADY_EXISTS,
                    cat("site ", site, " is already connected from another job (session ", session_hex(h.session), ", ", h.open,
                        " call(s) open): one job per site name; a restarted job is let in once the last one's calls "
                        "have ended")};
    if (h.session != 0)
      std::fprintf(stderr, "fedshard serve: %s: site %s: a new job (session %s) takes the name from session %s, "
                   "which has no call open\n", label_.c_str(), site.c_str(), session_hex(session).c_str(),
                   session_hex(h.session).c_str());
    h = Holder{session, ++tenures_, 0, now};
  }
  ++h.open;
  return h.tenure;
}

void SiteSessions::leave(const std::string& site, uint64_t tenure) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = holders_.find(site);
  if (it == holders_.end() || it->second.tenure != tenure) return;  // released (and maybe taken) meanwhile
  --it->second.open;
  it->second.last = Clock::now();
}

void SiteSessions::release(const std::string& site, uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = holders_.find(site);
  if (it != holders_.end() && it->second.session == session) holders_.erase(it);
}

}  // namespace fedshard::sites
