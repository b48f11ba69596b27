// The sizes of what SimGrid builds of a platform's network (network_size.hpp): counted from the
// platform's fields, saturating instead of overflowing, for the reader's bounds.

#include "comptrain/models/network_size.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "comptrain/support/checked.hpp"

namespace comptrain::models {

std::int64_t NetworkSpec::leaves() const {
  // Each factor is at most platform_limits::max_network_nodes (1e5); the product is capped as it
  // grows so that it never overflows.
  std::vector<int> factors;
  switch (topology) {
    case NetworkTopology::fat_tree: factors = fat_tree.down; break;
    case NetworkTopology::dragonfly: factors = {dragonfly.groups, dragonfly.chassis, dragonfly.routers, dragonfly.nodes}; break;
    case NetworkTopology::torus: factors = torus; break;
  }
  std::int64_t product = 1;
  for (const int f : factors) product = std::min<std::int64_t>(product * f, std::int64_t{1} << 40);
  return product;
}

namespace {

// Counts of a topology saturate here: far above every bound (platform_limits), far below overflow.
constexpr std::int64_t kCountCap = std::int64_t{1} << 62;

std::int64_t capped_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (const std::int64_t f : factors) product = checked_mul(product, f).value_or(kCountCap);
  return std::min(product, kCountCap);
}

std::int64_t capped_sum(std::int64_t a, std::int64_t b) { return std::min(checked_add(a, b).value_or(kCountCap), kCountCap); }

// Elements per level of SimGrid 3.32's fat tree (FatTreeZone::generate_switches): level 0 holds
// the places (the product of `down`), level l+1 the switches, up[0..l] x down[l+1..].
std::vector<std::int64_t> fat_tree_level_sizes(const FatTreeShape& tree) {
  const auto levels = static_cast<std::size_t>(tree.levels);
  std::vector<std::int64_t> sizes(levels + 1, 1);
  for (std::size_t i = 0; i < levels && i < tree.down.size(); ++i) sizes[0] = capped_product({sizes[0], tree.down[i]});
  for (std::size_t i = 0; i < levels; ++i) {
    std::int64_t n = 1;
    for (std::size_t j = 0; j <= i && j < tree.up.size(); ++j) n = capped_product({n, tree.up[j]});
    for (std::size_t j = i + 1; j < levels && j < tree.down.size(); ++j) n = capped_product({n, tree.down[j]});
    sizes[i + 1] = n;
  }
  return sizes;
}

}  // namespace

std::int64_t network_switches(const NetworkSpec& network) {
  switch (network.topology) {
    case NetworkTopology::fat_tree: {
      const std::vector<std::int64_t> sizes = fat_tree_level_sizes(network.fat_tree);
      std::int64_t total = 0;
      for (std::size_t l = 1; l < sizes.size(); ++l) total = capped_sum(total, sizes[l]);
      return total;
    }
    case NetworkTopology::dragonfly: return capped_product({network.dragonfly.groups, network.dragonfly.chassis, network.dragonfly.routers});
    case NetworkTopology::torus: return 0;
  }
  return 0;
}

std::int64_t network_links(const NetworkSpec& network) {
  switch (network.topology) {
    case NetworkTopology::fat_tree: {
      const std::vector<std::int64_t> sizes = fat_tree_level_sizes(network.fat_tree);
      std::int64_t total = 0;
      for (std::size_t l = 0; l < static_cast<std::size_t>(network.fat_tree.levels) && l < network.fat_tree.up.size() && l < network.fat_tree.links.size(); ++l) {
        total = capped_sum(total, capped_product({sizes[l], network.fat_tree.up[l], network.fat_tree.links[l]}));
      }
      return total;
    }
    case NetworkTopology::dragonfly: {
      // SimGrid 3.32 (DragonflyZone::generate_links) builds one link per pair, the `links` count
      // multiplying its bandwidth, not the links.
      const DragonflyShape& d = network.dragonfly;
      const std::int64_t routers = capped_product({d.groups, d.chassis, d.routers});
      const std::int64_t to_nodes = capped_product({routers, d.nodes});
      const std::int64_t in_chassis = capped_product({d.groups, d.chassis, d.routers, d.routers - 1}) / 2;
      const std::int64_t in_group = capped_product({d.groups, d.routers, d.chassis, d.chassis - 1}) / 2;
      const std::int64_t between_groups = capped_product({d.groups, d.groups - 1}) / 2;
      return capped_sum(capped_sum(to_nodes, in_chassis), capped_sum(in_group, between_groups));
    }
    case NetworkTopology::torus: {
      std::int64_t dimensions = 0;
      for (const int extent : network.torus) dimensions += extent > 1 ? 1 : 0;  // sim's builder leaves extents of 1 out
      return capped_product({network.leaves(), std::max<std::int64_t>(dimensions, 1)});
    }
  }
  return 0;
}

std::int64_t fat_tree_pairs(const NetworkSpec& network) {
  if (network.topology != NetworkTopology::fat_tree) return 0;
  const std::vector<std::int64_t> sizes = fat_tree_level_sizes(network.fat_tree);
  std::int64_t total = 0;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) total = capped_sum(total, capped_product({sizes[l], sizes[l + 1]}));
  return total;
}

}  // namespace comptrain::models
