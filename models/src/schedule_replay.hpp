#pragma once
// Internal: the static (one task at a time) replay behind sequential_peak_bytes, with a choice
// of which buffer roles count. The strategies use it to check activation budgets.

#include <array>
#include <cstdint>

#include "comptrain/models/schedule.hpp"

namespace comptrain::models::detail {

using RoleMask = std::array<bool, kMemoryRoleCount>;

// Peak, over the tasks run one at a time in `tasks` order, of the bytes allocated in buffers
// whose role is selected by `counted`.
std::int64_t sequential_peak_bytes(const Schedule& schedule, const RoleMask& counted);

// The roles that hold saved activations in some form: activation, compressed, prefetch.
RoleMask saved_activation_roles();

}  // namespace comptrain::models::detail
