// AddressMap (sim/core/address_map.h) against std::unordered_map, the table the replay used before: the same
// answers to every insert, find, operator[] and erase of a long random sequence over a small key range (so
// that probe runs collide, wrap around the table's end and are cut by erases), across growth and shrinking
// working sets.
#include <catch2/catch.hpp>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sim/core/address_map.h"
#include "test_rng.h"

namespace vramsim {
namespace {

TEST_CASE("AddressMap answers as std::unordered_map does", "[quick][core]") {
  for (const std::uint64_t key_range : {40u, 300u, 5000u}) {
    INFO("keys " << key_range);
    AddressMap<std::uint32_t> map;
    std::unordered_map<std::uint64_t, std::uint32_t> expected;
    test::Rng rng{key_range};
    for (int step = 0; step < 200000; ++step) {
      // Device addresses: multiples of 512, address 0 included.
      const std::uint64_t key = rng.below(key_range) * 512;
      const auto value = static_cast<std::uint32_t>(rng.next());
      // Phases that mostly insert, then mostly erase, so the live set grows and shrinks.
      const bool filling = (step / 20000) % 2 == 0;
      switch (rng.below(8)) {
        case 0:
        case 1:
        case 2:
          if (filling) {
            REQUIRE(map.insert(key, value) == expected.emplace(key, value).second);
            break;
          }
          [[fallthrough]];
        case 3:
        case 4: {
          REQUIRE(map.erase(key) == (expected.erase(key) == 1));
          break;
        }
        case 5:
          map[key] += 1;
          expected[key] += 1;
          break;
        default: {
          const std::uint32_t* found = map.find(key);
          const auto it = expected.find(key);
          REQUIRE((found != nullptr) == (it != expected.end()));
          if (found != nullptr) {
            REQUIRE(*found == it->second);
          }
        }
      }
      REQUIRE(map.size() == expected.size());
    }
    // Every key of the range, at the end.
    for (std::uint64_t k = 0; k < key_range; ++k) {
      const std::uint32_t* found = map.find(k * 512);
      const auto it = expected.find(k * 512);
      REQUIRE((found != nullptr) == (it != expected.end()));
      if (found != nullptr) {
        CHECK(*found == it->second);
      }
    }
  }
}

// Probe runs that wrap around the table's end, cut by erases: keys whose home is one of the last two slots of
// the 64-slot table (or the first), so that their run crosses from slot 63 to slot 0. Erasing one must keep
// every other reachable (backward-shift deletion may move an entry only towards its home, never past it).
TEST_CASE("AddressMap keeps wrapped probe runs reachable across erases", "[quick][core]") {
  std::vector<std::uint64_t> keys;
  for (std::uint64_t k = 1; keys.size() < 12; ++k) {
    const std::size_t home = AddressMap<std::uint32_t>::home_slot(k * 512, 64);
    if (home == 62 || home == 63 || home == 0) {
      keys.push_back(k * 512);
    }
  }
  for (std::size_t victim = 0; victim < keys.size(); ++victim) {
    AddressMap<std::uint32_t> map;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      REQUIRE(map.insert(keys[i], static_cast<std::uint32_t>(i)));
    }
    REQUIRE(map.slot_count() == 64);  // 12 entries: no growth, the runs stay where their homes put them
    REQUIRE(map.erase(keys[victim]));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      INFO("victim " << victim << ", key " << i);
      const std::uint32_t* found = map.find(keys[i]);
      if (i == victim) {
        CHECK(found == nullptr);
      } else {
        REQUIRE(found != nullptr);
        CHECK(*found == i);
      }
    }
  }
}

}  // namespace
}  // namespace vramsim
