#pragma once
// How calibrate's fit reports list their measurements (fit_table, network_fit_table): the fitted
// rows first, then the held-out ones under a heading of their own. Private to the studies.

#include <cstddef>
#include <string>
#include <vector>

namespace comptrain::sim::detail {

// `print(row)` appends one row to `out`; `row.held_out` says which part it belongs to. Returns
// the number of fitted rows.
template <class Row, class Print>
std::size_t append_fitted_then_held_out(std::string& out, const std::vector<Row>& rows, Print&& print) {
  std::size_t fitted = 0;
  for (const Row& r : rows) {
    if (r.held_out) continue;
    print(r);
    ++fitted;
  }
  if (fitted == rows.size()) return fitted;
  out += "held out (not fitted):\n";
  for (const Row& r : rows) {
    if (r.held_out) print(r);
  }
  return fitted;
}

}  // namespace comptrain::sim::detail
