// A refusal of a site's call: it reaches the peer as a gRPC status (its code, from grpc::StatusCode) and the server
// prints its words in one line (sites/service.h).
#pragma once

#include <string>

namespace fedshard::sites {

struct Refusal {
  int code;
  std::string message;
};

}  // namespace fedshard::sites
