// The two site settings that are lists: sites.server (each shard's HOST:PORT, in shard order) and sites.data
// ("I/N": read the data as group I of N equal groups of one job would). Parsed in one place for the config's
// validation and for the site's lane.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fedshard::sites {

// Throws fedshard::Error on an address that is not HOST:PORT.
std::vector<std::string> server_list(const std::string& spec);
// Throws fedshard::Error unless spec is I/N with 0 <= I < N.
std::pair<int, int> data_slot(const std::string& spec);

}  // namespace fedshard::sites
