#include "studies/plan/search.hpp"

#include <algorithm>
#include <optional>

namespace comptrain::sim::planner {

std::vector<std::int64_t> next_round(Search& s, const std::vector<std::int64_t>& divisors, int probes_per_round, std::int64_t ceiling) {
  const auto width = static_cast<std::int64_t>(std::max(1, probes_per_round));
  std::vector<std::int64_t> out;
  if (s.phase == Search::Phase::first && s.every_divisor) {
    out = divisors;
  } else if (s.phase == Search::Phase::first) {
    out.push_back(divisors.back());
  } else if (s.phase == Search::Phase::divisors) {
    for (std::ptrdiff_t i = 1; i <= width; ++i) {
      const std::ptrdiff_t k = s.lo_index + (s.hi_index - s.lo_index) * i / (width + 1);
      if (k > s.lo_index && k < s.hi_index && (out.empty() || out.back() != divisors[static_cast<std::size_t>(k)])) out.push_back(divisors[static_cast<std::size_t>(k)]);
    }
  } else if (s.phase == Search::Phase::grow) {
    while (static_cast<std::int64_t>(out.size()) < width && s.next_power > 0) {
      if (s.next_power >= ceiling) {
        out.push_back(ceiling);
        s.next_power = 0;  // the ceiling is the last growth probe
      } else {
        out.push_back(s.next_power);
        s.next_power *= 2;
      }
    }
  } else if (s.phase == Search::Phase::bisect) {
    for (std::int64_t i = 1; i <= width; ++i) {
      const std::int64_t b = s.lo + (s.hi - s.lo) * i / (width + 1);
      if (b > s.lo && b < s.hi && (out.empty() || out.back() != b)) out.push_back(b);
    }
  }
  return out;
}

void decide(Search& s, const std::vector<std::int64_t>& divisors) {
  if (s.phase == Search::Phase::extra) {
    s.phase = Search::Phase::done;  // comparison points only: the search itself was over
    return;
  }
  if (s.phase == Search::Phase::first || s.phase == Search::Phase::divisors) {
    if (s.phase == Search::Phase::first) s.hi_index = static_cast<std::ptrdiff_t>(divisors.size());
    std::sort(s.round.begin(), s.round.end());
    for (std::int64_t b : s.round) {
      const auto k = std::lower_bound(divisors.begin(), divisors.end(), b) - divisors.begin();
      if (!s.points.at(b).fits) {
        s.hi_index = k;
        s.hi = b;
        break;
      }
      s.lo_index = k;
      s.lo = b;
    }
    s.phase = s.hi_index - s.lo_index <= 1 || s.every_divisor ? Search::Phase::done : Search::Phase::divisors;
    return;
  }
  std::sort(s.round.begin(), s.round.end());
  std::optional<std::int64_t> first_fail;
  for (std::int64_t b : s.round) {
    if (!s.points.at(b).fits) {
      first_fail = b;
      break;
    }
    s.lo = b;
  }
  if (first_fail) {
    s.hi = *first_fail;
    s.phase = (s.lo == 0 || s.hi - s.lo <= 1) ? Search::Phase::done : Search::Phase::bisect;
  } else if (s.phase == Search::Phase::grow && s.next_power == 0) {
    s.phase = Search::Phase::done;  // the ceiling fits
  } else if (s.phase == Search::Phase::bisect && s.hi - s.lo <= 1) {
    s.phase = Search::Phase::done;
  }
}

}  // namespace comptrain::sim::planner
