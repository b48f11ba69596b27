#pragma once
// What SimGrid 3.32 builds of a platform's network and nodes, counted from the platform's fields
// before anything is built, and the bounds the platform reader holds them to (shared/defects-2/10,
// 11): every switch, link and, for a fat tree, every pair of adjacent levels' elements is made or
// examined before the first simulated second, whatever the run's shape (every place that no node
// of the run takes is a bare router), so each count grows with a product of the topology's fields.

#include <cstdint>

#include "comptrain/models/platform.hpp"

namespace comptrain::models {

namespace platform_limits {
// The topology's build within about 20 s and a few hundred MB on the 2-core development VM
// (scenarios/platforms/README.md, "Clusters"): a one-level fat tree of 100,000 places (100,000
// links and bare routers) took 11.9 s and 200 MB for a 2-node run, the same with 10 links per
// place (10^6 links) 83 s and 1.5 GB. So: 100,000 switches, as many as places for nodes
// (max_network_nodes); 200,000 links, two per place; 10^8 pairs of a fat tree's adjacent levels
// (each a comparison of two labels).
inline constexpr std::int64_t max_network_switches = 100'000;
inline constexpr std::int64_t max_network_links = 200'000;
inline constexpr std::int64_t max_fat_tree_pairs = 100'000'000;
// At most 8 torus dimensions: real tori have 3 to 6 (Blue Gene/Q 5, Fugaku's Tofu 6).
inline constexpr int max_torus_dimensions = 8;
// 1 to 1,024 GPUs per node (gpus_per_node): the largest NVLink domain sold joins 72 GPUs (NVIDIA
// GB200 NVL72), and the simulator builds a route for every ordered pair of a node's GPUs (a SimGrid
// full zone, sim/src/engine/cluster_network.cpp): 1,000 GPUs took 0.54 s and 144 MB, 10,000 131 s
// and 12.7 GB (shared/defects-2/11).
inline constexpr int max_gpus_per_node = 1024;
}  // namespace platform_limits

// The counts, capped at 2^62 instead of overflowing:
//   switches  fat-tree switches (every level's), dragonfly routers; a torus has none
//   links     cables, each one SimGrid link per direction: a fat tree's per level (elements x up
//             x links), a dragonfly's to its nodes, within a chassis (all-to-all routers), within
//             a group (all-to-all chassis, per router) and between groups (all-to-all; SimGrid
//             multiplies a dragonfly link's bandwidth by its `links`, not the links), a torus's
//             one per place and dimension of extent > 1 (sim builds no other)
//   pairs     a fat tree's candidate parents examined while it is wired: SimGrid 3.32 tests every
//             element of a level against every switch of the next
//             (FatTreeZone::connect_node_to_parents); 0 for the other topologies
std::int64_t network_switches(const NetworkSpec& network);
std::int64_t network_links(const NetworkSpec& network);
std::int64_t fat_tree_pairs(const NetworkSpec& network);

}  // namespace comptrain::models
